"""`floeline worker [worker.properties]`: the long-running process that hosts many
connectors in one warm Spark session.

In order: read the worker's settings; try the warehouse's worker lease (store.py);
start Spark once; start the REST server (rest.py) and print, flushed,
`rest.url=http://HOST:PORT` once it accepts requests. When another live worker holds
the lease, this one is a standby (standby.py): its listener points requests at the
active worker, and it takes the lease once that worker's process is gone or it stops
renewing. Holding the lease, it records its REST URL there, brings back every stored
connector in its target state (herder.py) and, with floeline.pipes=true, runs the
warehouse's auto-ingest pipes on a thread, as `floeline pipes run` does. Its listener
also serves Snowpipe Streaming's channels (channels.py) to any application.
SIGINT/SIGTERM stop every connector after its batch, then the process exits 0 (their
target states stay, so the next start brings them back). A lease taken over by another
worker (this one stalled past its timeout) stops everything and exits 1."""

from __future__ import annotations

import logging
import sys
import threading

from floeline.errors import FloelineError
from floeline.signals import stop_signals
from floeline.worker.channels import ChannelService
from floeline.worker.herder import Herder, LinePrefixer
from floeline.worker.settings import WorkerSettings, load_worker_settings
from floeline.worker.standby import Standby
from floeline.worker.store import ConnectorStore, WorkerLease

log = logging.getLogger("floeline")


def rest_server(settings: WorkerSettings, herder: Herder, channels=None):
    """The REST server (rest.py), imported when the worker starts."""
    try:
        from floeline.worker.rest import RestServer
    except ImportError as exc:
        raise FloelineError(f"the worker's REST server (floeline.worker.rest) is not part of this "
                            f"build ({exc}); install a floeline that has it") from None
    try:
        return RestServer(settings, herder, channels)
    except OSError as exc:
        listener = settings.listener
        raise FloelineError(f"cannot listen on {listener.host}:{listener.port} (listeners="
                            f"{listener.url}): {exc.strerror or exc}; free the port or set another "
                            f"listeners=http://HOST:PORT in the worker config") from None


def run_worker(path: str | None, out=None) -> int:
    out = out or sys.stdout
    settings = load_worker_settings(path)
    if settings.ignored_keys:
        print("ignored worker settings (Kafka Connect worker options floeline's worker does not "
              f"use): {', '.join(settings.ignored_keys)}", file=sys.stderr)
    from floeline.warehouse.catalog import Warehouse

    warehouse = Warehouse(settings.warehouse, settings.warehouse_s3)
    # The REST URL goes into the lease once the listener serves (its port may be 0 until then).
    lease = WorkerLease(warehouse.storage, warehouse.location, settings.lease_timeout_ms)
    holder = lease.try_acquire()
    standby = Standby(lease, holder) if holder is not None else None
    if standby is not None:
        print(f"worker: standby: the connectors of warehouse {warehouse.location} run in the worker at "
              f"{standby.describe()}; this one takes over when that worker's process is gone or it "
              f"stops renewing its lease (floeline.worker.lease.timeout.ms={holder.timeout_ms})",
              file=out, flush=True)
    elif lease.taken_from:
        print(f"worker: took over the warehouse's connectors from the worker at {lease.taken_from}",
              file=out, flush=True)
    stopping = threading.Event()
    herder = server = pipes = channels = None
    try:
        with stop_signals(stopping.set):
            spark = _start_spark(settings, out)
            herder = Herder(spark, settings, ConnectorStore(warehouse.storage, warehouse.location), out=out)
            channels = ChannelService(spark, settings, out=out, batch_slots=herder.batch_slots)
            server = rest_server(settings, herder, channels)
            server.standby = standby
            server.start()
            lease.listener = server.advertised_url
            if standby is None:
                lease.advertise(server.advertised_url)  # before rest.url: a standby started then finds it
            print(f"rest.url={server.url}", file=out, flush=True)
            if standby is not None:
                if not standby.wait(stopping):
                    return 0
                print("worker: took over the warehouse's connectors from the worker at "
                      + (lease.taken_from or f"{standby.describe()}, which stopped and released its lease"),
                      file=out, flush=True)
                lease.advertise(server.advertised_url)
            names = herder.start()
            server.standby = None
            print(f"worker: warehouse {warehouse.location}; {len(names)} connector(s) restored"
                  + (f": {', '.join(names)}" if names else ""), file=out, flush=True)
            if settings.pipes:
                pipes = _start_pipes(spark, warehouse, out)
            while not stopping.wait(0.5):
                if lease.lost:
                    raise FloelineError(f"{lease.lost}; this worker stopped its connectors (they "
                                        f"run on in the worker that took the lease)")
        return 0
    finally:
        print("worker: stopping every connector after its batch", file=out, flush=True)
        if server is not None:
            server.close()
        if channels is not None:
            channels.close()  # what the channels buffered is committed first
        if pipes is not None:
            service, thread = pipes
            service.request_stop()
            thread.join(120)
        if herder is not None:
            herder.close()
        lease.release()
        print("worker: stopped", file=out, flush=True)


def _start_spark(settings: WorkerSettings, out):
    from floeline.spark import WORKER_DRIVER_MEMORY, get_spark, under_spark_submit

    spark = get_spark(settings.spark_master, WORKER_DRIVER_MEMORY)
    if under_spark_submit():
        context = spark.sparkContext
        print(f"spark-submit: master={context.master} "
              f"driver={context.getConf().get('spark.driver.host', '?')} app={context.applicationId}",
              file=out, flush=True)
    return spark


def _start_pipes(spark, warehouse, out):
    """The warehouse's auto-ingest pipes on a thread of their own (`floeline pipes run`)."""
    from floeline.ingest.pipe_service import PipeService

    lines = LinePrefixer("pipes", out, threading.Lock())
    service = PipeService(spark, warehouse, report=lambda line: print(line, file=lines, flush=True))

    def run():
        try:
            service.run()
        except Exception as exc:  # noqa: BLE001 - the pipes' failure is theirs, not the connectors'
            log.error("the worker's pipe service stopped: %s", exc)

    thread = threading.Thread(target=run, name="floeline-pipes", daemon=True)
    thread.start()
    return service, thread
