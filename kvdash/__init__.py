"""kvdash: exact KV-cache capacity arithmetic for LLM serving."""

__version__ = "0.1.0"
