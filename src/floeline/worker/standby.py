"""A standby worker: a second `floeline worker` on a warehouse whose lease (store.py) a
live worker holds waits instead of exiting, so the loss of the active worker's host
does not stop the warehouse's connectors, as a Kafka Connect cluster moves a dead
worker's connectors to the others.

It starts Spark and its REST listener as the active worker does (a warm standby: a
takeover only starts the connectors' queries), then tries the lease every second. The
lease is taken once its holder's process is gone (same host, seen at the next try) or
it has not renewed for floeline.worker.lease.timeout.ms (another host); the worker
then brings every stored connector back in its target state, as a restarted worker
does, each resuming from the positions its tables hold.

Until then its REST listener answers in the active worker's stead: every request but
`GET /` gets 307 Temporary Redirect to the same path and query on the active worker's
URL (the one it recorded in the lease), with a Connect-style error body naming it, so
`curl -L`, Python's requests and browsers follow it and any other client reads where
to go. Connect's followers forward requests to the leader instead; a redirect keeps
the body and the credentials between the client and the active worker, and needs no
client TLS set-up between workers. With no live holder (the moment of a takeover) the
answer is 503 with Retry-After."""

from __future__ import annotations

import threading
import time

from floeline.worker.rest import Reply, error_reply
from floeline.worker.store import LeaseRecord, WorkerLease

POLL_S = 1.0


class Standby:
    """This worker while another holds the warehouse's lease (see the module doc)."""

    def __init__(self, lease: WorkerLease, holder: LeaseRecord, poll_s: float = POLL_S):
        self.lease, self.poll_s = lease, poll_s
        self._seen(holder)

    def _seen(self, holder: LeaseRecord) -> None:
        """The holder as the last try read it, and when (its staleness as of then)."""
        self.holder, self.seen_ms = holder, int(time.time() * 1000)

    def describe(self) -> str:
        holder = self.holder
        url = holder.listener or "(no REST URL recorded)"
        return f"{url} (host {holder.host}, pid {holder.pid})"

    def wait(self, stopping: threading.Event) -> bool:
        """Try the lease every poll until this worker holds it (True) or `stopping` is
        set (False)."""
        while not stopping.wait(self.poll_s):
            holder = self.lease.try_acquire()
            if holder is None:
                return True
            self._seen(holder)
        return False

    def reply(self, request, query: str) -> Reply | None:
        """The answer to a request while this worker waits: None for `GET /` (served
        as usual: the worker is alive), 307 to the active worker, or 503 while none
        is known to be active."""
        if request.method in ("GET", "HEAD") and request.path.rstrip("/") == "":
            return None
        holder = self.holder
        if self.lease.version is not None or holder.stale(self.seen_ms):
            return error_reply(503, "This worker is a standby taking over the warehouse's connectors "
                                    "(no worker is active now); try again in a few seconds",
                               {"Retry-After": "1"})
        if holder.listener is None:
            return error_reply(503, f"This worker is a standby; the active worker (host {holder.host}, pid "
                                    f"{holder.pid}) is starting and has not recorded its REST URL yet; "
                                    f"try again in a few seconds", {"Retry-After": "1"})
        location = holder.listener.rstrip("/") + request.path + (f"?{query}" if query else "")
        return error_reply(307, f"This worker is a standby: the warehouse's connectors run in the "
                                f"active worker {self.describe()}; send requests to {holder.listener} "
                                f"(this answer's Location). The standby takes over when that worker's "
                                f"process is gone or it stops renewing its lease",
                           {"Location": location})
