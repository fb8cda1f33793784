"""Operating a connector: Prometheus metrics (metrics.py) served with the probes
(http.py), and `floeline status` (status.py), which needs no Spark."""
