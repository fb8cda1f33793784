"""Operating a connector: the endpoints that serve its Prometheus metrics
(ingest/metrics.py counts them) with the probes (http.py), and `floeline status`
(status.py), which needs no Spark."""
