"""Jinja2 templates of the sweep reports (installed as the kvdash.templates package)."""
