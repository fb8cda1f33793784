"""Debezium's PostgreSQL connector on the local rig: a LocalPostgres (dev/postgres.py)
captured by a Kafka Connect worker (dev/connect.py) into the local broker. Used by the
CDC integration test, the fixture recorder (tests/fixtures/debezium/record.py) and by
hand (docs/development.md, "Change data capture rig").

`start_rig` starts the two services; `capture` registers one connector (its own
replication slot and publication, so several can read one database) with the JSON
converter, schemas on or off, and waits until it runs."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from floeline.dev.connect import ConnectWorker, fetch_debezium_postgres_plugin
from floeline.dev.postgres import LocalPostgres
from floeline.dev.services import free_port
from floeline.errors import SetupError

CONNECTOR_CLASS = "io.debezium.connector.postgresql.PostgresConnector"
JSON_CONVERTER = "org.apache.kafka.connect.json.JsonConverter"
APICURIO_AVRO_CONVERTER = "io.apicurio.registry.utils.converter.AvroConverter"


@dataclass
class Rig:
    postgres: LocalPostgres
    worker: ConnectWorker

    def stop(self) -> None:
        self.worker.stop()  # first: its connectors hold the replication slots
        self.postgres.stop()


def start_rig(bootstrap: str, state_dir: Path | str) -> Rig:
    """PostgreSQL and a Connect worker with Debezium's plug-in, both on free ports,
    their state under `state_dir` (postgres/, connect/); both stop at this process's exit."""
    state = Path(state_dir)
    postgres = LocalPostgres(state / "postgres", free_port()).start()
    try:
        worker = ConnectWorker(bootstrap, state / "connect", free_port(),
                               plugin_path=(fetch_debezium_postgres_plugin(),)).start()
    except BaseException:
        postgres.stop()
        raise
    return Rig(postgres, worker)


def connector_config(postgres: LocalPostgres, topic_prefix: str, tables: list[str],
                     schemas_enable: bool, **overrides: str) -> dict[str, str]:
    """Debezium's PostgreSQL connector reading `tables` (schema.table) with pgoutput into
    topics `<topic_prefix>.<schema>.<table>`, keys and values through Connect's JSON
    converter. Slot and publication are named after the prefix."""
    slot = "".join(c if c.isalnum() else "_" for c in topic_prefix.lower())
    config = {
        "connector.class": CONNECTOR_CLASS,
        "tasks.max": "1",
        "database.hostname": postgres.host,
        "database.port": str(postgres.port),
        "database.user": postgres.user,
        "database.password": "unused-trust-auth",
        "database.dbname": postgres.database,
        "topic.prefix": topic_prefix,
        "plugin.name": "pgoutput",
        "slot.name": f"{slot}_slot",
        "publication.name": f"{slot}_publication",
        "publication.autocreate.mode": "filtered",
        "table.include.list": ",".join(tables),
        "snapshot.mode": "initial",
        "topic.creation.default.replication.factor": "1",
        "topic.creation.default.partitions": "1",
        "key.converter": JSON_CONVERTER,
        "key.converter.schemas.enable": str(schemas_enable).lower(),
        "value.converter": JSON_CONVERTER,
        "value.converter.schemas.enable": str(schemas_enable).lower(),
    }
    config.update(overrides)
    return config


def avro_converter_settings(registry_url: str) -> dict[str, str]:
    """Key and value through Apicurio's Avro converter (in Debezium's plug-in directory)
    into the local registry (dev/registry.py; `registry_url` is the Confluent-compatible
    URL it returns), in Confluent's wire format: magic byte 0, a 4-byte schema id that
    the registry's /apis/ccompat/v7/schemas/ids/{id} serves, the Avro binary. Overrides
    for `connector_config`."""
    base = registry_url.split("/apis/")[0]
    settings = {}
    for side in ("key", "value"):
        settings.update({
            f"{side}.converter": APICURIO_AVRO_CONVERTER,
            f"{side}.converter.apicurio.registry.url": f"{base}/apis/registry/v2",
            f"{side}.converter.apicurio.registry.auto-register": "true",
            f"{side}.converter.apicurio.registry.find-latest": "true",
            f"{side}.converter.apicurio.registry.as-confluent": "true",
            f"{side}.converter.apicurio.registry.use-id": "contentId",
            f"{side}.converter.apicurio.registry.headers.enabled": "false",
        })
    return settings


def capture(worker: ConnectWorker, name: str, config: dict[str, str],
            timeout_s: float = 60) -> None:
    """Create connector `name` on `worker` and wait until it and its task run; a clear
    SetupError with the task's trace (and the worker's log) if either fails."""
    _request(worker, "PUT", f"/connectors/{name}/config", config)
    deadline = time.monotonic() + timeout_s
    status: dict = {}
    while time.monotonic() < deadline:
        try:
            status = _request(worker, "GET", f"/connectors/{name}/status")
        except SetupError:
            time.sleep(0.5)
            continue
        states = [status["connector"]["state"], *(t["state"] for t in status.get("tasks", []))]
        if "FAILED" in states:
            traces = [t.get("trace", "") for t in status.get("tasks", [])]
            raise SetupError(f"Debezium connector {name} failed: "
                             f"{status['connector'].get('trace', '')}{''.join(traces)[:4000]}")
        if status.get("tasks") and all(s == "RUNNING" for s in states):
            return
        time.sleep(0.5)
    raise SetupError(f"Debezium connector {name} did not reach RUNNING within {timeout_s:.0f}s "
                     f"(status {status}); see {worker.state / 'connect.log'}")


def delete_connector(worker: ConnectWorker, name: str) -> None:
    _request(worker, "DELETE", f"/connectors/{name}")


def _request(worker: ConnectWorker, method: str, path: str, body: dict | None = None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(worker.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            raw = answer.read()
    except urllib.error.HTTPError as exc:
        raise SetupError(f"Kafka Connect {method} {path} answered {exc.code}: "
                         f"{exc.read().decode(errors='replace')[:2000]}") from exc
    except OSError as exc:
        raise SetupError(f"Kafka Connect {method} {path} failed: {exc}") from exc
    return json.loads(raw) if raw else None


def main(argv: list[str] | None = None) -> int:
    """`python -m floeline.dev.debezium --bootstrap HOST:PORT`: the rig by hand, until
    Ctrl-C (docs/cdc-postgres-demo.md)."""
    import argparse
    import signal

    parser = argparse.ArgumentParser(prog="python -m floeline.dev.debezium",
                                     description="PostgreSQL + Debezium in Kafka Connect, "
                                                 "until Ctrl-C")
    parser.add_argument("--bootstrap", required=True, help="the broker, e.g. 127.0.0.1:19092")
    parser.add_argument("--state-dir", default=".floeline/cdc", type=Path)
    args = parser.parse_args(argv)
    rig = start_rig(args.bootstrap, args.state_dir)
    print(f"postgresql: {rig.postgres.dsn}  (log {rig.postgres.log})")
    print(f"kafka connect: {rig.worker.url}  (log {rig.worker.state / 'connect.log'})")
    print("Ctrl-C stops both", flush=True)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        rig.stop()
    return 0


def _interrupt(*_) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    raise SystemExit(main())
