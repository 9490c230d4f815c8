"""``kvdash exporter``: kvdash's figures for Prometheus (prometheus-client), refreshed in the background."""
