"""The HTTP endpoints a connector serves on floeline.metrics.port, on threads of their
own: `/metrics` (Prometheus text, or OpenMetrics when the scraper asks for it),
`/healthz` (liveness: 200 while the process is starting or its query runs, 503 once
the query ended) and `/ready` (readiness: 200 while the query runs and is caught up
within floeline.metrics.ready.max.lag). The probes answer one line saying why."""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import REGISTRY
from prometheus_client.exposition import choose_encoder

# A probe: (healthy or ready, the reason in one line).
Probe = Callable[[], tuple[bool, str]]


class OpsServer:
    """The endpoints on host:port (port 0: any free port, then `.port` says which)."""

    def __init__(self, host: str, port: int, health: Probe, ready: Probe,
                 before_scrape: Callable[[], None] = lambda: None, registry=REGISTRY):
        routes = {"/healthz": health, "/ready": ready}

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's name
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    before_scrape()
                    encoder, content_type = choose_encoder(self.headers.get("Accept"))
                    self._answer(200, encoder(registry), content_type)
                elif path in routes:
                    ok, reason = routes[path]()
                    self._answer(200 if ok else 503, (reason + "\n").encode("utf-8"),
                                 "text/plain; charset=utf-8")
                else:
                    self._answer(404, b"not found: /metrics, /healthz or /ready\n",
                                 "text/plain; charset=utf-8")

            def _answer(self, status: int, body: bytes, content_type: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_args):  # no line per scrape on the connector's output
                pass

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self.host, self.port = host, self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="floeline-ops-http",
                                        daemon=True)

    def start(self) -> OpsServer:
        self._thread.start()
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
