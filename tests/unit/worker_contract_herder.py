"""InMemoryContractHerder: the herder contract (PREAMBLE / floeline/worker/herder.py) in
plain Python, runs no connector. The REST tests use it to exercise routing, masking and
the shapes without Spark; the real Herder (floeline.worker.herder) replaces it wherever
it is importable (see `herder_for_tests`). Not a mock of Kafka, Spark or Delta: it
stands for a sibling module's interface while that module is built elsewhere."""

from __future__ import annotations

import threading

from floeline.config import read_config
from floeline.worker.errors import AlreadyExists, BadRequest, NotFound

OFFSETS_ALTERED = "The offsets for this connector have been altered successfully"
OFFSETS_RESET = "The offsets for this connector have been reset successfully"


class InMemoryContractHerder:
    """Connectors as configs and target states; each one "runs" at once."""

    def __init__(self, worker_id: str = "127.0.0.1:8083"):
        self.worker_id = worker_id
        self._lock = threading.Lock()
        self._configs: dict[str, dict[str, str]] = {}
        self._states: dict[str, str] = {}
        self._offsets: dict[str, list[dict]] = {}

    def set_worker_id(self, worker_id: str) -> None:
        self.worker_id = worker_id

    def _known(self, name: str) -> None:
        if name not in self._configs:
            raise NotFound(f"Connector {name} not found")

    @staticmethod
    def _check(config: dict[str, str]) -> None:
        _, problems = read_config(config)
        if problems:
            raise BadRequest("invalid connector config:\n" + "\n".join(f"  - {p}" for p in problems))

    def connectors(self) -> list[str]:
        with self._lock:
            return sorted(self._configs)

    def create(self, name, config, initial_state="RUNNING", initial_offsets=None) -> None:
        self._check(config)
        with self._lock:
            if name in self._configs:
                raise AlreadyExists(f"Connector {name} already exists")
            self._configs[name] = dict(config)
            self._states[name] = initial_state
            self._offsets[name] = list(initial_offsets or [])

    def config(self, name) -> dict[str, str]:
        with self._lock:
            self._known(name)
            return dict(self._configs[name])

    def put_config(self, name, config) -> bool:
        self._check(config)
        with self._lock:
            created = name not in self._configs
            self._configs[name] = dict(config)
            self._states.setdefault(name, "RUNNING")
            self._offsets.setdefault(name, [])
            return created

    def patch_config(self, name, patch) -> dict[str, str]:
        with self._lock:
            self._known(name)
            merged = {**self._configs[name], **patch}
            merged = {k: v for k, v in merged.items() if v is not None}
        self._check(merged)
        with self._lock:
            self._configs[name] = merged
            return dict(merged)

    def delete(self, name) -> None:
        with self._lock:
            self._known(name)
            for store in (self._configs, self._states, self._offsets):
                store.pop(name, None)

    def info(self, name) -> dict:
        config = self.config(name)
        return {"name": name, "config": config, "tasks": [{"connector": name, "task": 0}], "type": "sink"}

    def status(self, name) -> dict:
        with self._lock:
            self._known(name)
            state = self._states[name]
        tasks = [] if state == "STOPPED" else [{"id": 0, "state": state, "worker_id": self.worker_id}]
        return {"name": name, "connector": {"state": state, "worker_id": self.worker_id},
                "tasks": tasks, "type": "sink"}

    def tasks(self, name) -> list[dict]:
        return [{"id": {"connector": name, "task": 0}, "config": self.config(name)}]

    def topics(self, name) -> list[str]:
        return sorted(t.strip() for t in (self.config(name).get("topics") or "").split(",") if t.strip())

    def _set_state(self, name, state) -> None:
        with self._lock:
            self._known(name)
            self._states[name] = state

    def pause(self, name) -> None:
        self._set_state(name, "PAUSED")

    def resume(self, name) -> None:
        self._set_state(name, "RUNNING")

    def stop(self, name) -> None:
        self._set_state(name, "STOPPED")

    def restart(self, name, include_tasks=False, only_failed=False):
        status = self.status(name)
        if not include_tasks and not only_failed:
            return None
        if not only_failed or status["connector"]["state"] == "FAILED":
            status["connector"]["state"] = "RESTARTING"
            if include_tasks:
                for task in status["tasks"]:
                    task["state"] = "RESTARTING"
        return status

    def restart_task(self, name, task) -> None:
        self.status(name)
        if task != 0:
            raise NotFound(f"Task {name}-{task} not found")

    def offsets(self, name) -> dict:
        with self._lock:
            self._known(name)
            return {"offsets": list(self._offsets[name])}

    def _require_stopped(self, name) -> None:
        if self.status(name)["connector"]["state"] != "STOPPED":
            raise BadRequest(f"Connectors must be in the STOPPED state before their offsets can be "
                             f"modified. This can be done for the specified connector by issuing a "
                             f"'PUT' request to the '/connectors/{name}/stop' endpoint")

    def alter_offsets(self, name, offsets) -> str:
        self._require_stopped(name)
        with self._lock:
            self._offsets[name] = list(offsets)
        return OFFSETS_ALTERED

    def reset_offsets(self, name) -> str:
        self._require_stopped(name)
        with self._lock:
            self._offsets[name] = []
        return OFFSETS_RESET

    def close(self) -> None:
        with self._lock:
            self._states = {name: "STOPPED" for name in self._states}
