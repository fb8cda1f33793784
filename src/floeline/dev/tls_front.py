"""A TLS-terminating front for a local HTTP service (the schema registry), for the tests
of floeline's registry client: it serves HTTPS with the local CA's certificate for
localhost and 127.0.0.1 (dev/kafka_secure.py makes them), optionally asks every client
for a certificate that CA signed (mutual TLS) and a bearer token, and forwards every
request it accepts to the plain-HTTP service behind it. Requests it refuses are
answered 401 as a registry that requires the token would answer them.

It runs in a thread of the process that starts it; `close` stops it."""

from __future__ import annotations

import http.server
import os
import ssl
import tempfile
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass, field

from floeline.config.tls import pkcs12_pem
from floeline.dev.kafka_secure import SecureBrokerSecrets
from floeline.dev.services import HOST


@dataclass
class Seen:
    """What the front saw of one request."""

    path: str
    authorization: str | None
    client_certificate: dict | None  # the verified client certificate, when one was sent
    headers: dict[str, str] = field(default_factory=dict)


class TlsFront:
    """HTTPS on 127.0.0.1:`port` (0: any free port) in front of `upstream` (a base URL
    like http://127.0.0.1:18081). `token`: the bearer token a request must carry;
    `client_certificates`: whether a client must show a certificate the local CA signed."""

    def __init__(self, upstream: str, tls: SecureBrokerSecrets, token: str | None = None,
                 client_certificates: bool = False, port: int = 0):
        self.upstream = upstream.rstrip("/")
        self.token = token
        self.seen: list[Seen] = []
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        with tempfile.TemporaryDirectory(prefix="floeline-front-") as tmp:
            pem = os.path.join(tmp, "server.pem")
            fd = os.open(pem, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as out:
                out.write(pkcs12_pem(tls.keystore.read_bytes(), tls.store_password))
            context.load_cert_chain(pem)
        if client_certificates:
            context.verify_mode = ssl.CERT_REQUIRED
            context.load_verify_locations(cafile=str(tls.ca_pem))
        front = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):
                self._forward()

            def do_POST(self):
                self._forward()

            def do_PUT(self):
                self._forward()

            def do_DELETE(self):
                self._forward()

            def _forward(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                authorization = self.headers.get("Authorization")
                front.seen.append(Seen(self.path, authorization, self.connection.getpeercert() or None,
                                       dict(self.headers.items())))
                if front.token is not None and authorization != f"Bearer {front.token}":
                    self._answer(401, b'{"error_code":401,"message":"Unauthorized"}',
                                 "application/json")
                    return
                headers = {k: v for k, v in self.headers.items()
                           if k.lower() in ("content-type", "accept")}
                request = urllib.request.Request(front.upstream + self.path, data=body,
                                                 method=self.command, headers=headers)
                try:
                    with urllib.request.urlopen(request, timeout=30) as reply:
                        self._answer(reply.status, reply.read(), reply.headers.get("Content-Type"))
                except urllib.error.HTTPError as exc:
                    self._answer(exc.code, exc.read(), exc.headers.get("Content-Type"))
                except (urllib.error.URLError, OSError):
                    self._answer(502, b'{"error_code":502,"message":"upstream unavailable"}',
                                 "application/json")

            def _answer(self, status: int, body: bytes, content_type: str | None):
                self.send_response(status)
                self.send_header("Content-Type", content_type or "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        class Server(http.server.ThreadingHTTPServer):
            daemon_threads = True

            def get_request(self):
                sock, address = super().get_request()
                return context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False), address

            def handle_error(self, request, client_address):
                pass  # a refused handshake (no or a wrong client certificate): the client sees it

        self._server = Server((HOST, port), Handler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="tls-front",
                                        daemon=True)
        self._thread.start()

    def url(self, path: str = "", host: str = HOST) -> str:
        """The front's URL for `path` of the service behind it (e.g. /apis/ccompat/v7)."""
        return f"https://{host}:{self.port}{path}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)
