"""The calculator core: pure Python, no textual, polars, jinja2 or pynvml (a ruff rule enforces it)."""
