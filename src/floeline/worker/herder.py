"""The herder: the connectors one worker runs, each a floeline Connector (one streaming
query) on a thread of its own in the worker's one Spark session, as Kafka Connect's
herder runs connectors and tasks. Its methods are what the REST API calls (rest.py);
names, states and messages are Connect's.

Each connector has a supervisor thread that makes its actual state follow its target
state (RUNNING, PAUSED, STOPPED; kept in the warehouse by store.py, so a restarted
worker brings each back as it was):

    UNASSIGNED   starting: config read, source planned, query not active yet. While a
                 call to its broker, stream or registry is retried, `trace` says which
                 and the fix (waits.py); so does RUNNING's, for a wait in a batch
    RUNNING      its streaming query is active
    PAUSED       its query stopped after its batch (positions stay in the tables)
    STOPPED      as PAUSED, and Connect's STOPPED: no task; offsets may be altered
    FAILED       its connector raised a terminal error; `trace` says what and how to
                 fix it. It stays FAILED (the others run on) until a restart or a
                 config update retries it.
    RESTARTING   a restart was asked for, until its query runs again

pause/resume/stop/restart only change the target and ask the running query to stop
after its current batch; the supervisor does the rest, so they return at once.
A connector runs with its own settings over the worker's defaults
(settings.WorkerSettings.connector_settings); `${env:...}`/`${file:...}` values are
resolved when it starts and kept as written in the store. A connector's own
floeline.metrics.port is ignored (the worker serves every connector's metrics on its
REST listener's /metrics), with a logged notice.

Two locks keep the herder coherent without one slow request stalling the others. The
herder's lock guards the connectors' in-memory state and is held only while that state
is read or changed, never across a store write (an S3 PUT on an s3a warehouse) or a
wait. Each connector's changes (create, config, target state, delete, offsets) are
ordered by a lock of its own, held across its store write and the change that follows,
so two requests about one connector happen one after the other and the store and the
memory agree after each; requests about other connectors, and every read, go on
meanwhile. A change reaches memory only once the store has it: a failed write changes
nothing.

The connectors share the session's cores: at most floeline.worker.batch.slots of their
micro-batches run at once (default: twice Spark's default parallelism), the others wait
for a slot before they read anything. Twenty connectors catching up at once otherwise
each hold a batch's rows together (bench/RESULTS.md, 2026-11-27: 2.8 GB with no limit,
2.3 GB with four slots, 2.1 GB with two, for about the same rows/s); twice the cores
keeps the driver's gaps between a small batch's jobs filled (two slots lost a quarter
of the rows/s of twenty connectors' first batches, four lost none)."""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import time
import traceback

from floeline import secret_references, startup, waits
from floeline.config import ConnectorConfig, config_from_dict, describe_ignored
from floeline.errors import ConfigError, FloelineError
from floeline.ingest.metrics import forget_connector
from floeline.secrets import scrub
from floeline.worker.errors import AlreadyExists, BadRequest, NotFound
from floeline.worker.settings import WorkerSettings
from floeline.worker.store import TARGET_STATES, ConnectorStore

log = logging.getLogger("floeline")

# Keys a connector may not set inside a worker (the worker serves them itself).
WORKER_SERVED_KEYS = ("floeline.metrics.port", "floeline.metrics.host")
# How long delete and close wait for a connector's batch in flight to commit.
STOP_WAIT_S = 180.0


class LinePrefixer:
    """A text stream that writes each whole line to `out` as "[name] line": the
    progress lines of many connectors on one worker's output stay attributable."""

    def __init__(self, name: str, out, lock: threading.Lock):
        self.prefix, self.out, self.lock, self.pending = f"[{name}] ", out, lock, ""

    def write(self, text: str) -> int:
        self.pending += text
        *lines, self.pending = self.pending.split("\n")
        if lines:
            with self.lock:
                for line in lines:
                    self.out.write(self.prefix + line + "\n")
        return len(text)

    def flush(self) -> None:
        with self.lock:
            self.out.flush()


class _Runner:
    """One connector's config, target and actual state, and its supervisor thread."""

    def __init__(self, herder: Herder, name: str, config: dict[str, str], target: str):
        self.herder, self.name, self.config, self.target = herder, name, dict(config), target
        self.state = "UNASSIGNED" if target == "RUNNING" else target
        self.trace: str | None = None
        self.connector = None  # the running floeline Connector
        self.retry = False  # a restart or config update asks to run it again
        self.restarting = False
        self.deleted = False
        self.routes: set[str] = set()
        self.wake = threading.Event()
        self.thread = threading.Thread(target=self._supervise, name=f"floeline-connector-{name}", daemon=True)

    # -- called under the herder's lock ---------------------------------------------

    def request(self, target: str | None = None, retry: bool = False) -> None:
        """Change the target and/or ask for a fresh run; the running query (if any)
        stops after its batch and the supervisor acts."""
        if target is not None:
            self.target = target
        if retry:
            self.retry = True
        if self.connector is not None and (self.target != "RUNNING" or self.retry or self.deleted):
            self.connector.stop()
        self.wake.set()

    def actual_state(self) -> str:
        if self.state in ("UNASSIGNED", "RESTARTING") and self.connector is not None \
                and self.connector.health()[1] == "active" and not self.retry:
            self.state, self.restarting = "RUNNING", False
        return self.state

    # -- the supervisor thread ---------------------------------------------------------

    def _supervise(self) -> None:
        while True:
            self.wake.wait()
            with self.herder._lock:
                self.wake.clear()
                if self.deleted or self.herder._closing:
                    self.state = "UNASSIGNED" if self.deleted else self.state
                    return
                if self.target != "RUNNING":
                    self.state, self.trace, self.retry, self.restarting = self.target, None, False, False
                    continue
                if self.state == "FAILED" and not self.retry:
                    continue
                self.state = "RESTARTING" if self.restarting else "UNASSIGNED"
                self.retry, self.trace = False, None
                config = dict(self.config)
            self._run_once(config)

    def _run_once(self, config: dict[str, str]) -> None:
        connector, error = None, None
        try:
            cfg = self.herder.connector_config(self.name, config)
            connector = self.herder.make_connector(cfg, self.name)
            with self.herder._lock:
                self.connector = connector
                self.routes.update(cfg.topics)
                if self.target != "RUNNING" or self.retry or self.deleted or self.herder._closing:
                    connector.stop()
            connector.run()
        except BaseException as exc:  # noqa: BLE001 - one connector's failure is its own
            error = exc
        waits.forget(self.name)  # whatever this run waited for, it no longer does
        with self.herder._lock:
            if connector is not None:
                self.routes.update(connector.routes)
            self.connector = None
            # A stop asked of this run counts even when the target is RUNNING again by now
            # (a pause and a resume at once): the supervisor then starts a fresh run.
            asked = (connector is not None and connector.stop_requested) or self.target != "RUNNING" \
                or self.retry or self.deleted or self.herder._closing
            if error is not None and not asked:
                self.state, self.trace = "FAILED", failure_trace(self.name, error)
                log.error("connector %s failed: %s", self.name, scrub(str(error)))
            elif not asked:
                self.state, self.trace = "FAILED", (
                    f"connector {self.name}'s streaming query ended by itself; restart it "
                    f"(POST /connectors/{self.name}/restart)")
            else:
                if error is not None:
                    log.warning("connector %s stopped with: %s", self.name, scrub(str(error)))
                self.state = self.target if self.target != "RUNNING" else "UNASSIGNED"
            self.wake.set()


def failure_trace(name: str, exc: BaseException) -> str:
    """A FAILED connector's trace: the error (floeline's messages say how to fix it),
    then where it came from; secrets scrubbed."""
    head = f"{type(exc).__name__}: {exc}"
    if not isinstance(exc, FloelineError):
        head += (f"\n(an unexpected error: fix its cause, then restart the connector: "
                 f"POST /connectors/{name}/restart)")
    stack = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)[-12:])
    return scrub(head + "\n\n" + stack)


class Herder:
    """The worker's connectors (see the module doc). Thread-safe; every method naming a
    connector raises NotFound("Connector NAME not found") when there is none."""

    def __init__(self, spark, settings: WorkerSettings, store: ConnectorStore, out=None,
                 worker_id: str | None = None):
        self.spark, self.settings, self.store = spark, settings, store
        self.out = out or sys.stdout
        self.worker_id = worker_id or f"{settings.listener.host}:{settings.listener.port}"
        self._lock = threading.RLock()
        self._out_lock = threading.Lock()
        self._runners: dict[str, _Runner] = {}
        self._orders: dict[str, list] = {}  # name -> [its ordering lock, how many hold or wait for it]
        self._closing = False
        self._batch_slots: threading.BoundedSemaphore | None = None  # made with the first connector

    def set_worker_id(self, worker_id: str) -> None:
        self.worker_id = worker_id

    # ---- starting and stopping the worker ---------------------------------------------

    def start(self) -> list[str]:
        """Bring back every stored connector in its target state; their names."""
        names = []
        for stored in self.store.load_all():
            with self._lock:
                runner = _Runner(self, stored.name, stored.config, stored.target_state)
                self._runners[stored.name] = runner
                runner.thread.start()
                runner.wake.set()
            names.append(stored.name)
        return names

    def close(self) -> None:
        """Stop every connector after its batch (worker shutdown; target states stay)."""
        with self._lock:
            self._closing = True
            runners = list(self._runners.values())
            for runner in runners:
                if runner.connector is not None:
                    runner.connector.stop()
                runner.wake.set()
        deadline = time.monotonic() + STOP_WAIT_S
        for runner in runners:
            runner.thread.join(max(0.1, deadline - time.monotonic()))

    @contextlib.contextmanager
    def _ordered(self, name: str):
        """Hold connector `name`'s ordering lock (see the module doc); re-entrant, and
        forgotten once nobody holds or waits for it."""
        with self._lock:
            entry = self._orders.setdefault(name, [threading.RLock(), 0])
            entry[1] += 1
        try:
            with entry[0]:
                yield
        finally:
            with self._lock:
                entry[1] -= 1
                if entry[1] == 0:
                    del self._orders[name]

    # ---- connectors' configs -----------------------------------------------------------

    def _runner(self, name: str) -> _Runner:
        runner = self._runners.get(name)
        if runner is None or runner.deleted:
            raise NotFound(f"Connector {name} not found")
        return runner

    def connectors(self) -> list[str]:
        with self._lock:
            return sorted(n for n, r in self._runners.items() if not r.deleted)

    def connector_settings(self, name: str, config: dict[str, str]) -> dict[str, str]:
        """The settings connector `name` runs with: its config over the worker's defaults,
        references resolved, worker-served keys left out."""
        merged = self.settings.connector_settings({**config, "name": name})
        for key in WORKER_SERVED_KEYS:
            if merged.pop(key, None) is not None:
                log.warning("connector %s: %s is ignored in a worker: the worker serves every "
                            "connector's metrics on its REST listener's /metrics", name, key)
        problems = []
        for key, value in merged.items():
            if secret_references.is_reference(value):
                try:
                    merged[key] = secret_references.resolve(value, f"{key}")
                except FloelineError as exc:
                    problems.append(str(exc))
        if problems:
            raise ConfigError("invalid connector config:\n" + "\n".join(f"  - {p}" for p in problems))
        return merged

    def connector_config(self, name: str, config: dict[str, str]) -> ConnectorConfig:
        cfg = config_from_dict(self.connector_settings(name, config))
        from floeline.records.support import check_supported

        check_supported(cfg)
        return cfg

    def _validated(self, name: str, config: dict[str, str]) -> dict[str, str]:
        """The config as it will be stored (with its name), or BadRequest naming every
        problem."""
        config = {str(k): str(v) for k, v in config.items()}
        given = (config.get("name") or "").strip()
        if given and given != name:
            raise BadRequest(f"Connector name configuration ({given}) doesn't match connector name "
                             f"in the URL ({name})")
        if not name or not name.strip():
            raise BadRequest("Connector name is required")
        config["name"] = name
        try:
            cfg = self.connector_config(name, config)
        except ConfigError as exc:
            raise BadRequest(scrub(str(exc))) from None
        ignored = describe_ignored(cfg)
        if ignored:
            log.info("connector %s: %s", name, ignored)
        return config

    def create(self, name: str, config: dict[str, str], initial_state: str = "RUNNING",
               initial_offsets: list[dict] | None = None) -> None:
        initial_state = (initial_state or "RUNNING").upper()
        if initial_state not in TARGET_STATES:
            raise BadRequest(f"initial_state {initial_state!r} is not one of {', '.join(TARGET_STATES)}")
        config = self._validated(name, config)
        with self._ordered(name):
            with self._lock:
                if name in self._runners:
                    raise AlreadyExists(f"Connector {name} already exists")
            # As Connect, with offsets: created STOPPED, its offsets applied, then its initial state.
            first = "STOPPED" if initial_offsets else initial_state
            self.store.save(name, config, first)
            runner = _Runner(self, name, config, first)
            with self._lock:
                self._runners[name] = runner
            if initial_offsets:
                try:
                    self._offsets_module().alter_offsets(self.connector_config(name, config), self.spark,
                                                         initial_offsets, self._requested_by())
                except BaseException:
                    with self._lock:
                        self._runners.pop(name, None)
                    self.store.delete(name)
                    raise
                self.store.save(name, config, initial_state)
                with self._lock:
                    runner.target = initial_state
                    runner.state = "UNASSIGNED" if initial_state == "RUNNING" else initial_state
            runner.thread.start()
            runner.wake.set()

    def config(self, name: str) -> dict[str, str]:
        with self._lock:
            return dict(self._runner(name).config)

    def put_config(self, name: str, config: dict[str, str]) -> bool:
        with self._ordered(name):
            with self._lock:
                exists = name in self._runners
            if not exists:
                self.create(name, config)
                return True
            self._update(name, self._validated(name, config))
            return False

    def patch_config(self, name: str, patch: dict[str, str | None]) -> dict[str, str]:
        with self._ordered(name):
            merged = self.config(name)
            for key, value in patch.items():
                if value is None:
                    merged.pop(key, None)
                else:
                    merged[key] = value
            merged = self._validated(name, merged)
            self._update(name, merged)
            return dict(merged)

    def _update(self, name: str, config: dict[str, str]) -> None:
        """Store the new config and run the connector again with it (when it runs)."""
        with self._ordered(name):
            with self._lock:
                target = self._runner(name).target
            self.store.save(name, config, target)
            with self._lock:
                runner = self._runner(name)
                runner.config = dict(config)
                runner.request(retry=True)

    def delete(self, name: str) -> None:
        """Forget the connector in the store, then stop it and wait (up to STOP_WAIT_S)
        for its batch in flight; only requests about this connector wait with it."""
        with self._ordered(name):
            with self._lock:
                self._runner(name)
            self.store.delete(name)
            with self._lock:
                runner = self._runner(name)
                runner.deleted = True
                runner.request()
            runner.thread.join(STOP_WAIT_S)
            with self._lock:
                if self._runners.get(name) is runner:
                    del self._runners[name]
        forget_connector(name)  # its series leave /metrics with it

    # ---- what a connector is -----------------------------------------------------------

    def info(self, name: str) -> dict:
        with self._lock:
            runner = self._runner(name)
            tasks = [] if runner.target == "STOPPED" else [{"connector": name, "task": 0}]
            return {"name": name, "config": dict(runner.config), "tasks": tasks, "type": "sink"}

    def status(self, name: str) -> dict:
        with self._lock:
            runner = self._runner(name)
            state, trace = runner.actual_state(), runner.trace
        if trace is None and state in ("UNASSIGNED", "RUNNING", "RESTARTING"):
            trace = waits.waiting_for(name)  # what it waits for and the fix (waits.py)
        connector = {"state": state, "worker_id": self.worker_id}
        if trace:
            connector["trace"] = trace
        tasks = []
        if state != "STOPPED":
            task = {"id": 0, "state": state, "worker_id": self.worker_id}
            if trace:
                task["trace"] = trace
            tasks.append(task)
        return {"name": name, "connector": connector, "tasks": tasks, "type": "sink"}

    def tasks(self, name: str) -> list[dict]:
        with self._lock:
            runner = self._runner(name)
            if runner.target == "STOPPED":
                return []
            return [{"id": {"connector": name, "task": 0}, "config": dict(runner.config)}]

    def topics(self, name: str) -> list[str]:
        with self._lock:
            runner = self._runner(name)
            if runner.connector is not None:
                runner.routes.update(runner.connector.routes)
            return sorted(runner.routes)

    def before_scrape(self) -> None:
        """Before /metrics answers: each running connector asks its source for its heads
        (at most once a second), so the lag gauges are fresh, as `floeline run`'s are."""
        with self._lock:
            running = [r.connector for r in self._runners.values() if r.connector is not None]
        for connector in running:
            connector.refresh_heads()

    # ---- target states -------------------------------------------------------------------

    def _set_target(self, name: str, target: str) -> None:
        with self._ordered(name):
            config = self.config(name)
            self.store.save(name, config, target)
            with self._lock:
                self._runner(name).request(target=target)

    def pause(self, name: str) -> None:
        self._set_target(name, "PAUSED")

    def resume(self, name: str) -> None:
        self._set_target(name, "RUNNING")

    def stop(self, name: str) -> None:
        self._set_target(name, "STOPPED")

    def restart(self, name: str, include_tasks: bool = False, only_failed: bool = False) -> dict | None:
        """Connect's restart: plain (None when done) restarts the connector (a FAILED one
        is retried); with include_tasks/only_failed the status after marking what
        restarts (RESTARTING). A PAUSED or STOPPED connector is not started by it."""
        with self._lock:
            runner = self._runner(name)
            state = runner.actual_state()
            restarts = runner.target == "RUNNING" and (not only_failed or state == "FAILED")
            if restarts:
                runner.restarting = include_tasks or only_failed
                if runner.restarting:
                    runner.state = "RESTARTING"
                runner.request(retry=True)
        if not include_tasks and not only_failed:
            return None
        return self.status(name)

    def restart_task(self, name: str, task: int) -> None:
        with self._lock:
            runner = self._runner(name)
            if task != 0:
                raise NotFound(f"Task {name}-{task} not found")
            if runner.target == "RUNNING":
                runner.request(retry=True)

    # ---- offsets (KIP-875), through offsets.py --------------------------------------------

    @staticmethod
    def _offsets_module():
        try:
            from floeline.worker import offsets
        except ImportError as exc:
            raise FloelineError(f"the offsets API is not available in this build ({exc})") from None
        return offsets

    def _requested_by(self) -> str:
        return f"worker {self.worker_id}"

    def _stopped_config(self, name: str) -> ConnectorConfig:
        with self._lock:
            runner = self._runner(name)
            stopped = runner.target == "STOPPED" and runner.connector is None \
                and runner.actual_state() == "STOPPED"
            config = dict(runner.config)
        if not stopped:
            raise BadRequest(f"Connectors must be in the STOPPED state before their offsets can be "
                             f"modified. This can be done for the specified connector by issuing a "
                             f"'PUT' request to the '/connectors/{name}/stop' endpoint")
        return self.connector_config(name, config)

    def offsets(self, name: str) -> dict:
        config = self.config(name)
        cfg = self.connector_config(name, config)
        return {"offsets": self._offsets_module().connector_offsets(cfg, self.spark)}

    def alter_offsets(self, name: str, offsets: list[dict]) -> str:
        with self._ordered(name):  # a resume meanwhile waits until the offsets are written
            cfg = self._stopped_config(name)
            return self._offsets_module().alter_offsets(cfg, self.spark, offsets, self._requested_by())

    def reset_offsets(self, name: str) -> str:
        with self._ordered(name):
            cfg = self._stopped_config(name)
            return self._offsets_module().reset_offsets(cfg, self.spark, self._requested_by())

    # ---- one run of a connector -------------------------------------------------------------

    def make_connector(self, cfg: ConnectorConfig, name: str):
        """A floeline Connector for `cfg` in the worker's session: its own start-up clock
        (from now) and its own prefixed output, no endpoints of its own."""
        from floeline.ingest import Connector

        return Connector(cfg, self.spark, out=LinePrefixer(name, self.out, self._out_lock),
                         clock=startup.StartupClock(launched_at=time.time()),
                         batch_slots=self.batch_slots())

    def batch_slots(self) -> threading.BoundedSemaphore | None:
        """The slots every connector's micro-batch holds while it runs (see the module
        doc); None with floeline.worker.batch.slots=0 (no limit)."""
        with self._lock:
            if self._batch_slots is None:
                slots = self.settings.batch_slots
                if slots is None:
                    slots = 2 * self.spark.sparkContext.defaultParallelism
                if slots == 0:
                    return None
                self._batch_slots = threading.BoundedSemaphore(slots)
            return self._batch_slots
