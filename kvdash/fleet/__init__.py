"""The fleet view: many GPU hosts and engines read from Prometheus' HTTP API (no UI, no textual)."""
