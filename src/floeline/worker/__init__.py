"""floeline's worker: many connectors in one long-running Spark session, driven by
Kafka Connect's REST API (issue 25).

Modules:
- errors: the REST errors (Connect's status codes and error body).
- herder: the connectors the worker runs, their configs, target states and status.
- store: configs, target states and offset changes kept under the warehouse.
- settings: the worker's own keys (worker.properties).
- offsets: Connect's offsets API (KIP-875) over the positions the tables hold.
- rest: the HTTP server speaking Connect's REST API over the herder.
- validation: per-key config problems in Connect's ConfigInfos shape.
- masking: secrets masked on the way out, kept when a masked value comes back.
- auth: optional HTTP Basic authentication from a users file.
- channels: Snowpipe Streaming's channels (open, append rows, status, drop) on the
  same listener, for any application.
"""
