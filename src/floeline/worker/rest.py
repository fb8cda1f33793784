"""Kafka Connect's REST API (Apache Kafka 4.x) over the worker's herder, and under
/v2/streaming/ Snowpipe Streaming's channels (channels.py), behind the same checks.

Same paths, bodies, status codes and error body ({"error_code": N, "message": ...}) as
a Connect worker, so kcctl, AKHQ, kafka-ui, Terraform or curl drive floeline unchanged;
tests/worker/test_rest_shapes.py checks them against a real Connect worker. Where
Connect answers 500 for a client's mistake (malformed or empty JSON, a connector
unknown to restart, an unknown plugin to validate) floeline answers 400 or 404.

The server is the standard library's threading HTTP server with a thread per
connection, at most floeline.worker.rest.max.connections of them: a connection over
the bound gets 503 at once from the accepting thread, never a thread. Each request is
checked in an order that keeps a client without credentials from costing memory: its
credentials from the headers (401, and a declared body is never read: the connection
closes), then its framing and declared length (400, 413), then its body, read in
pieces within the clocks and limits of limits.py (413 the moment a chunked body passes
the limit). No handler holds a lock while it waits, so slow clients do not touch the
connectors' queries (pause, resume, stop are asynchronous as in Connect). Configs go
out masked (masking.py); a masked secret sent back keeps the stored one. Optional Basic
auth (auth.py) and TLS come from the worker's keys:

    listeners=http://127.0.0.1:8083 | https://HOST:PORT   (one listener; port 0: any free)
    rest.advertised.host.name / rest.advertised.port / rest.advertised.listener
                                           the URL others reach this worker at (Connect's keys;
                                           recorded in the warehouse's worker lease)
    listeners.https.ssl.certificate.location=PEM certificate (chain)
    listeners.https.ssl.key.location=PEM private key (or in the certificate's file)
    listeners.https.ssl.key.password=the key's passphrase, if it has one
    rest.auth.users.file=users file (auth.py)
    floeline.worker.rest.max.connections=64  connections served at once (settings.py)
"""

from __future__ import annotations

import io
import json
import logging
import re
import socket
import ssl
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, quote, unquote, urlsplit

from prometheus_client import REGISTRY
from prometheus_client.exposition import choose_encoder

from floeline import __version__
from floeline.errors import ConfigError
from floeline.secrets import scrub
from floeline.worker import channels, limits, validation
from floeline.worker.auth import REALM, USERS_FILE_KEY, Users, load_users
from floeline.worker.errors import BadRequest, NotFound, RestError
from floeline.worker.loggers import Loggers, jvm_of, valid_level
from floeline.worker.masking import mask_config, mask_info, mask_tasks, unmask_config
from floeline.worker.settings import DEFAULT_MAX_CONNECTIONS, MAX_CONNECTIONS_KEY, max_connections

log = logging.getLogger(__name__)

DEFAULT_LISTENER = "http://127.0.0.1:8083"
HEALTHY = {"status": "healthy", "message": "Worker has completed startup and is ready to handle requests."}
INITIAL_STATES = ("RUNNING", "PAUSED", "STOPPED")


# ---------------------------------------------------------------- settings

@dataclass(frozen=True)
class RestSettings:
    """The REST listener's keys, read from the worker's properties."""

    scheme: str = "http"
    host: str = "127.0.0.1"
    port: int = 8083
    certificate: str | None = None
    key: str | None = None
    key_password: str | None = None
    users_file: str | None = None
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    advertised_scheme: str | None = None  # rest.advertised.listener
    advertised_host: str | None = None  # rest.advertised.host.name
    advertised_port: int | None = None  # rest.advertised.port

    @staticmethod
    def from_properties(props: Mapping[str, str]) -> RestSettings:
        listener = (props.get("listeners") or DEFAULT_LISTENER).strip()
        if "," in listener:
            raise ConfigError(f"listeners={listener}: the worker serves one listener; keep one of them")
        match = re.fullmatch(r"(https?)://(\[[0-9a-fA-F:]+\]|[^:/\s]*):(\d{1,5})/?", listener)
        if not match or int(match[3]) > 65535:
            raise ConfigError(f"listeners={listener!r} is not a listener; write it as "
                              f"http://HOST:PORT or https://HOST:PORT (default {DEFAULT_LISTENER})")
        scheme, host, port = match[1], match[2].strip("[]") or "127.0.0.1", int(match[3])
        cert = _blank_none(props.get("listeners.https.ssl.certificate.location"))
        key = _blank_none(props.get("listeners.https.ssl.key.location"))
        if scheme == "https" and cert is None:
            raise ConfigError(f"listeners={listener} needs listeners.https.ssl.certificate.location "
                              f"(a PEM certificate) and listeners.https.ssl.key.location (its PEM key)")
        if scheme == "http" and (cert or key):
            raise ConfigError("listeners.https.ssl.* are set but listeners is http://...; "
                              "use https://HOST:PORT or remove them")
        advertised_scheme = _blank_none(props.get("rest.advertised.listener"))
        if advertised_scheme is not None and advertised_scheme.lower() not in ("http", "https"):
            raise ConfigError(f"rest.advertised.listener={advertised_scheme!r}: accepted values: http, https")
        advertised_port = _blank_none(props.get("rest.advertised.port"))
        if advertised_port is not None and (not advertised_port.isdigit() or not 0 < int(advertised_port) < 65536):
            raise ConfigError(f"rest.advertised.port={advertised_port!r}: accepted values: a port, 1-65535")
        return RestSettings(scheme, host, port, cert, key,
                            _blank_none(props.get("listeners.https.ssl.key.password")),
                            _blank_none(props.get(USERS_FILE_KEY)), max_connections(props),
                            advertised_scheme and advertised_scheme.lower(),
                            _blank_none(props.get("rest.advertised.host.name")),
                            int(advertised_port) if advertised_port else None)

    def tls_context(self) -> ssl.SSLContext | None:
        if self.scheme != "https":
            return None
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            context.load_cert_chain(self.certificate, self.key, self.key_password)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(
                f"listeners.https.ssl.certificate.location={self.certificate} / "
                f"listeners.https.ssl.key.location={self.key}: cannot load the PEM certificate and "
                f"key ({getattr(exc, 'strerror', None) or exc}); check the paths and "
                f"listeners.https.ssl.key.password") from None
        return context


def _blank_none(value: str | None) -> str | None:
    return value.strip() if value and value.strip() else None


def worker_properties(settings) -> Mapping[str, str]:
    """The worker's keys: `settings` itself when a mapping, else its `properties` or `raw`."""
    if isinstance(settings, Mapping):
        return settings
    for name in ("properties", "raw"):
        found = getattr(settings, name, None)
        if isinstance(found, Mapping):
            return found
    return {}


# ---------------------------------------------------------------- requests and replies

@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    body: bytes
    headers: Mapping[str, str]

    def json(self):
        """The body as JSON; malformed or empty -> 400 (Connect answers 500)."""
        text = self.body.decode("utf-8", errors="replace").strip()
        if not text:
            raise BadRequest("The request body is empty; send a JSON document")
        try:
            return json.loads(text)
        except ValueError as exc:
            raise BadRequest(f"The request body is not valid JSON: {exc}") from None
        except RecursionError:
            raise BadRequest("The request body nests JSON arrays or objects too deeply") from None

    def flag(self, name: str) -> bool:
        """A boolean query parameter as Jersey reads it: true only when "true"."""
        return any(v.strip().lower() == "true" for v in self.query.get(name, []))


@dataclass
class Reply:
    status: int
    body: object = None  # JSON-able; None: no body
    headers: dict[str, str] | None = None
    raw: bytes | None = None  # a body that is not JSON (/metrics)
    content_type: str = "application/json"


def error_reply(status: int, message: str, headers: dict[str, str] | None = None) -> Reply:
    return Reply(status, {"error_code": status, "message": scrub(message)}, headers)


# ---------------------------------------------------------------- the API

class ConnectApi:
    """The endpoints, as methods taking the request and the path's parts."""

    def __init__(self, herder, base_url: Callable[[], str], channels_service=None):
        self.herder, self._base_url = herder, base_url
        self.loggers = Loggers(jvm_of(herder))  # /admin/loggers
        self.channels = channels_service  # Snowpipe Streaming's channels (channels.py), or None

    # -- worker
    def root(self, req: Request) -> Reply:
        """floeline's version; no build commit is recorded ("unknown"); the Kafka cluster
        id when the herder knows it (its `kafka_cluster_id`), else null."""
        cluster = getattr(self.herder, "kafka_cluster_id", None)
        return Reply(200, {"version": __version__, "commit": "unknown",
                           "kafka_cluster_id": cluster() if callable(cluster) else cluster})

    def health(self, req: Request) -> Reply:
        return Reply(200, HEALTHY)

    def metrics(self, req: Request) -> Reply:
        """Every connector's metrics; a herder with `before_scrape()` refreshes what is
        measured on demand (the sources' heads, hence lag) first, as `floeline run` does."""
        refresh = getattr(self.herder, "before_scrape", None)
        if callable(refresh):
            refresh()
        encoder, content_type = choose_encoder(req.headers.get("Accept"))
        return Reply(200, raw=encoder(REGISTRY), content_type=content_type)

    # -- connectors
    def list_connectors(self, req: Request) -> Reply:
        names = self.herder.connectors()
        expand = [e for value in req.query.get("expand", []) for e in value.split(",")]
        if not any(e in ("status", "info") for e in expand):
            return Reply(200, names)
        found = {}
        for name in names:
            try:
                entry = {}
                if "status" in expand:
                    entry["status"] = self._status(name)
                if "info" in expand:
                    entry["info"] = mask_info(self.herder.info(name))
                found[name] = entry
            except NotFound:  # deleted meanwhile
                continue
        return Reply(200, found)

    def create(self, req: Request) -> Reply:
        body = req.json()
        if not isinstance(body, dict):
            raise BadRequest('The request body must be a JSON object: {"name": ..., "config": {...}}')
        name = body.get("name")
        if not isinstance(name, str) or not name.strip():
            raise BadRequest('The request body has no connector "name": send {"name": ..., "config": {...}}')
        name = name.strip()
        config = _config_of(body.get("config"), '"config"')
        _put_name(config, name)
        state = body.get("initial_state") or "RUNNING"
        if not isinstance(state, str) or state.upper() not in INITIAL_STATES:
            raise BadRequest(f"initial_state={state!r} is not valid; accepted values: {', '.join(INITIAL_STATES)}")
        offsets = body.get("offsets")
        if offsets is not None and not isinstance(offsets, list):
            raise BadRequest('"offsets" must be a list of {"partition": {...}, "offset": {...}}')
        self.herder.create(name, config, state.upper(), offsets)
        return Reply(201, mask_info(self.herder.info(name)),
                     {"Location": f"{self._base_url()}/connectors/{quote(name, safe='')}"})

    def get_connector(self, req: Request, name: str) -> Reply:
        return Reply(200, mask_info(self.herder.info(name)))

    def delete(self, req: Request, name: str) -> Reply:
        self.herder.delete(name)
        return Reply(204)

    def get_config(self, req: Request, name: str) -> Reply:
        return Reply(200, mask_config(self.herder.config(name)))

    def put_config(self, req: Request, name: str) -> Reply:
        config = _config_of(req.json(), "the request body")
        _put_name(config, name)
        config = unmask_config(config, self._stored(name))
        created = self.herder.put_config(name, config)
        info = mask_info(self.herder.info(name))
        if created:
            return Reply(201, info, {"Location": f"{self._base_url()}/connectors/{quote(name, safe='')}"})
        return Reply(200, info)

    def patch_config(self, req: Request, name: str) -> Reply:
        patch = _config_of(req.json(), "the request body", allow_null=True)
        given = patch.get("name")
        if given is not None and given != name:
            raise BadRequest(f"Connector name configuration ({given}) doesn't match connector name "
                             f"in the URL ({name})")
        patch = unmask_config(patch, self.herder.config(name))
        self.herder.patch_config(name, patch)
        return Reply(200, mask_info(self.herder.info(name)))

    def status(self, req: Request, name: str) -> Reply:
        return Reply(200, self._status(name))

    def pause(self, req: Request, name: str) -> Reply:
        self.herder.pause(name)
        return Reply(202)

    def resume(self, req: Request, name: str) -> Reply:
        self.herder.resume(name)
        return Reply(202)

    def stop(self, req: Request, name: str) -> Reply:
        self.herder.stop(name)
        return Reply(204)  # Connect 4.x answers 204 to stop (202 to pause and resume)

    def restart(self, req: Request, name: str) -> Reply:
        status = self.herder.restart(name, include_tasks=req.flag("includeTasks"),
                                     only_failed=req.flag("onlyFailed"))
        return Reply(204) if status is None else Reply(202, _with_versions(status))

    def tasks(self, req: Request, name: str) -> Reply:
        return Reply(200, mask_tasks(self.herder.tasks(name)))

    def task_status(self, req: Request, name: str, task: str) -> Reply:
        for entry in self._status(name).get("tasks", []):
            if entry.get("id") == int(task):
                return Reply(200, entry)
        raise NotFound(f"No status found for task {name}-{int(task)}")

    def restart_task(self, req: Request, name: str, task: str) -> Reply:
        self.herder.restart_task(name, int(task))
        return Reply(204)

    def topics(self, req: Request, name: str) -> Reply:
        return Reply(200, {name: {"topics": list(self.herder.topics(name))}})

    def reset_topics(self, req: Request, name: str) -> Reply:
        # floeline's topics are what the tables hold; there is no separate set to reset.
        self.herder.config(name)  # NotFound for an unknown connector
        return Reply(202)

    # -- offsets
    def get_offsets(self, req: Request, name: str) -> Reply:
        return Reply(200, self.herder.offsets(name))

    def alter_offsets(self, req: Request, name: str) -> Reply:
        body = req.json()
        offsets = body.get("offsets") if isinstance(body, dict) else None
        if not isinstance(offsets, list):
            raise BadRequest('The request body must be {"offsets": [{"partition": {...}, "offset": {...}}, ...]}')
        if not offsets:
            raise BadRequest("Partitions / offsets need to be provided for an alter offsets request")
        return Reply(200, {"message": self.herder.alter_offsets(name, offsets)})

    def reset_offsets(self, req: Request, name: str) -> Reply:
        return Reply(200, {"message": self.herder.reset_offsets(name)})

    # -- plugins
    def plugins(self, req: Request) -> Reply:
        return Reply(200, validation.connector_plugins())

    def plugin_config(self, req: Request, plugin: str) -> Reply:
        return Reply(200, validation.plugin_config(plugin))

    # -- log levels (Connect's LoggingResource): this worker's Python and Spark loggers
    def list_loggers(self, req: Request) -> Reply:
        return Reply(200, self.loggers.all_levels())

    def get_logger(self, req: Request, logger: str) -> Reply:
        found = self.loggers.level(logger)
        if found is None:
            raise NotFound(f"Logger {logger} not found.")
        return Reply(200, found)

    def set_logger(self, req: Request, logger: str) -> Reply:
        body = req.json()
        given = body.get("level") if isinstance(body, dict) else None
        if given is None:
            raise BadRequest("Desired 'level' parameter was not specified in request.")
        level = valid_level(str(given))
        if level is None:
            raise NotFound(f"invalid log level '{given}'.")
        changed = self.loggers.set_level(logger, level)
        # scope=cluster: every worker of the cluster; this worker is its only one
        if any(s.strip().lower() == "cluster" for s in req.query.get("scope", [])):
            return Reply(204)
        return Reply(200, changed)

    def validate(self, req: Request, plugin: str) -> Reply:
        validation.plugin_class(plugin)  # 404 for an unknown plugin before reading the body
        config = _config_of(req.json(), "the request body")
        settings = getattr(self.herder, "settings", None)  # the worker's defaults, as create merges them
        inherit = settings.connector_settings if settings is not None else None
        return Reply(200, validation.validate(plugin, config, inherit))

    # -- helpers
    def _status(self, name: str) -> dict:
        return _with_versions(self.herder.status(name))

    def _stored(self, name: str) -> dict[str, str] | None:
        try:
            return self.herder.config(name)
        except NotFound:
            return None


def _with_versions(status: dict) -> dict:
    """A status with the plugin "version" Connect 4.x puts on the connector and each task,
    and its traces scrubbed of any secret value."""
    def entry(state: dict) -> dict:
        out = {**state, "version": state.get("version", __version__)}
        if isinstance(out.get("trace"), str):
            out["trace"] = scrub(out["trace"])
        return out

    out = dict(status)
    if isinstance(out.get("connector"), dict):
        out["connector"] = entry(out["connector"])
    out["tasks"] = [entry(t) for t in out.get("tasks", [])]
    return out


def _config_of(value, what: str, allow_null: bool = False) -> dict[str, str | None]:
    """A config sent as JSON: an object of strings (numbers and booleans are taken as
    their text, as Connect does); null only where it removes a key (PATCH)."""
    if not isinstance(value, dict):
        raise BadRequest(f"{what} must be a JSON object of config keys and string values")
    config: dict[str, str | None] = {}
    for key, item in value.items():
        if isinstance(item, bool):
            config[key] = "true" if item else "false"
        elif isinstance(item, (str, int, float)):
            config[key] = str(item)
        elif item is None and allow_null:
            config[key] = None
        else:
            raise BadRequest(f"config key {key!r} has a {type(item).__name__ if item is not None else 'null'} "
                             f"value; give it a string")
    return config


def _put_name(config: dict, name: str) -> None:
    """The connector's name goes into its config, as Connect puts it; a different one is an error."""
    given = config.get("name")
    if given is not None and given != name:
        raise BadRequest(f"Connector name configuration ({given}) doesn't match connector name in the URL ({name})")
    config["name"] = name


# ---------------------------------------------------------------- routing

_NAME = r"(?P<name>[^/]+)"
_TASK = r"(?P<task>[0-9]{1,9})"
_PLUGIN = r"(?P<plugin>[^/]+)"
_LOGGER = r"(?P<logger>[^/]+)"
ROUTES: list[tuple[re.Pattern, dict[str, str]]] = [(re.compile(f"^{p}$"), m) for p, m in [
    ("/", {"GET": "root"}),
    ("/health", {"GET": "health"}),
    ("/metrics", {"GET": "metrics"}),
    ("/connectors", {"GET": "list_connectors", "POST": "create"}),
    (f"/connectors/{_NAME}", {"GET": "get_connector", "DELETE": "delete"}),
    (f"/connectors/{_NAME}/config", {"GET": "get_config", "PUT": "put_config", "PATCH": "patch_config"}),
    (f"/connectors/{_NAME}/status", {"GET": "status"}),
    (f"/connectors/{_NAME}/pause", {"PUT": "pause"}),
    (f"/connectors/{_NAME}/resume", {"PUT": "resume"}),
    (f"/connectors/{_NAME}/stop", {"PUT": "stop"}),
    (f"/connectors/{_NAME}/restart", {"POST": "restart"}),
    (f"/connectors/{_NAME}/tasks", {"GET": "tasks"}),
    (f"/connectors/{_NAME}/tasks/{_TASK}/status", {"GET": "task_status"}),
    (f"/connectors/{_NAME}/tasks/{_TASK}/restart", {"POST": "restart_task"}),
    (f"/connectors/{_NAME}/topics", {"GET": "topics"}),
    (f"/connectors/{_NAME}/topics/reset", {"PUT": "reset_topics"}),
    (f"/connectors/{_NAME}/offsets", {"GET": "get_offsets", "PATCH": "alter_offsets",
                                      "DELETE": "reset_offsets"}),
    ("/connector-plugins", {"GET": "plugins"}),
    (f"/connector-plugins/{_PLUGIN}/config", {"GET": "plugin_config"}),
    (f"/connector-plugins/{_PLUGIN}/config/validate", {"PUT": "validate"}),
    ("/admin/loggers", {"GET": "list_loggers"}),
    (f"/admin/loggers/{_LOGGER}", {"GET": "get_logger", "PUT": "set_logger"}),
]]


def route(api: ConnectApi, req: Request) -> Reply:
    """The reply to `req`: its endpoint's, or Connect's 404 / 405, or the error's body."""
    path = req.path.rstrip("/") or "/"
    if path.startswith(channels.PREFIX):
        status, body, headers = channels.handle(api.channels, req.method, path, req.query, req.body)
        return Reply(status, body, headers)
    for pattern, methods in ROUTES:
        match = pattern.match(path)
        if match is None:
            continue
        method = methods.get("GET" if req.method == "HEAD" else req.method)
        if method is None:
            return error_reply(405, "HTTP 405 Method Not Allowed")
        params = {k: unquote(v) for k, v in match.groupdict().items()}
        try:
            return getattr(api, method)(req, **params)
        except RestError as exc:
            return error_reply(exc.status, str(exc))
        except ConfigError as exc:  # a config the herder refused without a RestError
            return error_reply(400, str(exc))
        except Exception as exc:  # noqa: BLE001 - the client gets Connect's 500 body, the log the trace
            log.error("REST %s %s failed:\n%s", req.method, req.path, scrub(traceback.format_exc()))
            return error_reply(500, f"{type(exc).__name__}: {exc}")
    return error_reply(404, "HTTP 404 Not Found")


# ---------------------------------------------------------------- the server

_AUTH_REQUIRED = ("Authentication required: send HTTP Basic credentials of a user in the worker's "
                  "rest.auth.users.file")


class _Server(ThreadingHTTPServer):
    """A thread per connection, at most `max_connections` at once: a connection over the
    bound is answered 503 by the accepting thread and closed, so a flood of connections
    costs kernel buffers, not threads."""

    daemon_threads = True
    block_on_close = False  # stopping the worker does not wait for slow clients
    request_queue_size = 512  # a burst of connections waits in the kernel's backlog

    def __init__(self, address, handler, max_connections: int):
        self.max_connections = max_connections
        self._slots = threading.BoundedSemaphore(max_connections)
        self._refused_logged = 0.0
        super().__init__(address, handler)

    def process_request(self, request, client_address):
        if not self._slots.acquire(blocking=False):
            self._refuse(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def _refuse(self, request) -> None:
        """503, written without reading the request; a TLS connection is only closed (its
        handshake would need a thread)."""
        message = (f"The worker serves at most {self.max_connections} connections at once "
                   f"({MAX_CONNECTIONS_KEY}); try again")
        if not isinstance(request, ssl.SSLSocket):
            body = json.dumps({"error_code": 503, "message": message}).encode()
            head = (f"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {len(body)}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n")
            try:
                request.setblocking(False)
                request.send(head.encode() + body)
            except OSError:
                pass
        self.shutdown_request(request)
        if time.monotonic() - self._refused_logged > 60:
            self._refused_logged = time.monotonic()
            log.warning("REST: %s (refused a connection with 503; logged at most once a minute)", message)


class RestServer:
    """The REST API on the worker's listener. `start()` returns self once it accepts
    requests and tells the herder its worker id (HOST:PORT)."""

    def __init__(self, settings, herder, channels_service=None):
        self.settings = RestSettings.from_properties(worker_properties(settings))
        self.users: Users | None = load_users(self.settings.users_file) if self.settings.users_file else None
        self.herder = herder
        self.api = ConnectApi(herder, lambda: self.url, channels_service)
        # While this worker is a standby: an object whose reply(request) answers in the
        # active worker's stead (standby.py), None for a request it lets through.
        self.standby = None
        self._server = _Server((self.settings.host, self.settings.port), _handler_for(self),
                               self.settings.max_connections)
        context = self.settings.tls_context()
        if context is not None:
            # The handshake runs on the connection's thread (Handler.setup), not in accept().
            self._server.socket = context.wrap_socket(self._server.socket, server_side=True,
                                                      do_handshake_on_connect=False)
        self.port = self._server.server_address[1]
        self.host = self.settings.host
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,),
                                        name="floeline-rest", daemon=True)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.settings.scheme}://{host}:{self.port}"

    @property
    def advertised_url(self) -> str:
        """Where other machines reach this worker, as Connect advertises it: the
        rest.advertised.* keys, else the listener's (a wildcard host: this machine's name)."""
        s = self.settings
        host = s.advertised_host or (socket.gethostname() if self.host in ("0.0.0.0", "::", "") else self.host)
        host = f"[{host}]" if ":" in host else host
        return f"{s.advertised_scheme or s.scheme}://{host}:{s.advertised_port or self.port}"

    def start(self) -> RestServer:
        if hasattr(self.herder, "set_worker_id"):
            self.herder.set_worker_id(urlsplit(self.advertised_url).netloc)
        self._thread.start()
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _handler_for(server: RestServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = f"floeline/{__version__}"
        default_request_version = "HTTP/1.0"  # every answer has a status line (no HTTP/0.9)

        def setup(self):
            """The connection read through limits.py's clocks (StreamRequestHandler's
            makefile() would read without them)."""
            self.connection = self.request
            if isinstance(self.connection, ssl.SSLSocket):
                self.connection.settimeout(limits.HEAD_S)
                self.connection.do_handshake()
            self.clock = limits.ClockedSocket(self.connection)
            self.rfile = io.BufferedReader(self.clock)
            self.wfile = _SocketWriter(self.connection)

        def handle_one_request(self):
            """One request: the standard library's, within limits.py's clocks and head
            budget, and with every method routed (an unknown one is Connect's 405/404,
            not 501)."""
            self.clock.await_request()
            try:
                self.raw_requestline = self.rfile.readline(limits.HEAD_BYTES + 1)
                if not self.raw_requestline:
                    self.close_connection = True
                    return
                if self.parse_request():
                    self._serve()
                    self.wfile.flush()
            except limits.HeadTooLarge as exc:
                self.send_error(431, str(exc))
            except TimeoutError:
                self.close_connection = True

        def handle_expect_100(self):
            return True  # "100 Continue" only once the credentials and length are checked (_reply)

        def send_error(self, code, message=None, explain=None):
            """The standard library's own refusals (a bad request line, too many headers)
            in Connect's error body; the connection closes."""
            self.close_connection = True
            self._send(error_reply(code, message or HTTPStatus(code).phrase))

        def _serve(self) -> None:
            try:
                reply = self._reply()
            except limits.BodyTooLarge as exc:
                reply = error_reply(413, str(exc))
                self.close_connection = True
            except limits.Unreadable as exc:
                reply = error_reply(400, str(exc))
                self.close_connection = True
            self._send(reply)

        def _reply(self) -> Reply:
            if server.users is not None and not server.users.check_header(self.headers.get("Authorization")):
                if limits.declares_body(self.headers):
                    self.close_connection = True  # the body is never read
                return error_reply(401, _AUTH_REQUIRED,
                                   {"WWW-Authenticate": f'Basic realm="{REALM}", charset="UTF-8"'})
            length = limits.framing(self.headers)
            if length != 0 and self.headers.get("Expect", "").lower() == "100-continue" \
                    and self.request_version >= "HTTP/1.1":
                self.send_response_only(100)
                self.end_headers()
            self.clock.read_body()
            body = limits.read_body(self.rfile, length)
            try:
                parts = urlsplit(self.path)
            except ValueError as exc:
                raise limits.Unreadable(f"the request target {self.path[:80]!r} is not a path: {exc}") from None
            request = Request(self.command, parts.path, parse_qs(parts.query, keep_blank_values=True),
                              body, self.headers)
            standby = server.standby
            redirected = standby.reply(request, parts.query) if standby is not None else None
            return redirected or route(server.api, request)

        def _send(self, reply: Reply) -> None:
            payload = reply.raw
            if payload is None and reply.body is not None:
                payload = json.dumps(reply.body).encode("utf-8")
            try:
                self.connection.settimeout(limits.IDLE_S)  # a client that does not read is dropped
                self.send_response(reply.status)
                for key, value in (reply.headers or {}).items():
                    self.send_header(key, value)
                if payload is not None:
                    self.send_header("Content-Type", reply.content_type)
                self.send_header("Content-Length", str(len(payload or b"")))
                if self.close_connection:
                    self.send_header("Connection", "close")
                self.end_headers()
                if payload and self.command != "HEAD":
                    self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
                self.close_connection = True

        def handle(self):
            try:
                super().handle()
            except (ssl.SSLError, ConnectionResetError, BrokenPipeError, TimeoutError):
                pass  # a client that failed its TLS handshake or went away

        def log_message(self, *_args):  # no line per request on the worker's output
            pass

    return Handler


class _SocketWriter(io.BufferedIOBase):
    """Writes go to the socket whole (as socketserver's private writer does)."""

    def __init__(self, sock):
        self._sock = sock

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        self._sock.sendall(data)
        return len(data)
