"""Shared by the integration tests: the schemas they produce with, the Confluent wire
format, schema registration against the real registry, and reading a topic back."""

from __future__ import annotations

import importlib.resources
import io
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid

import fastavro

ORDER_V1 = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "id", "type": "long"},
    {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID"]}},
    {"name": "tags", "type": {"type": "map", "values": "int"}},
    {"name": "note", "type": ["null", "string"], "default": None},
]}
ORDER_V2 = {**ORDER_V1, "fields": ORDER_V1["fields"] + [
    {"name": "channel", "type": "string", "default": "web"}]}

ORDER_PROTO = """syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";

message Order {
  int64 id = 1;
  string name = 2;
  repeated double amounts = 3;
  enum Color { RED = 0; BLUE = 1; }
  Color color = 4;
  map<string, int32> counts = 5;
  google.protobuf.Timestamp at = 6;
}
"""


def register(registry: str, subject: str, schema: str, schema_type: str | None = None) -> int:
    body = {"schema": schema, **({"schemaType": schema_type} if schema_type else {})}
    request = urllib.request.Request(
        f"{registry}/subjects/{subject}/versions", data=json.dumps(body).encode(), method="POST",
        headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
    with urllib.request.urlopen(request, timeout=10) as reply:
        return json.loads(reply.read())["id"]


def wire(schema_id: int, payload: bytes) -> bytes:
    """The Confluent wire format: magic byte 0, the schema id (4 bytes), the payload."""
    return b"\0" + schema_id.to_bytes(4, "big") + payload


def avro(schema, record) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return out.getvalue()


def proto_class(text: str, name: str):
    """The producer's message class, compiled with protoc on its own."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    import grpc_tools

    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "order.proto"), "w") as f:
            f.write(text)
        out = os.path.join(tmp, "order.desc")
        subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{tmp}",
                        f"-I{importlib.resources.files(grpc_tools) / '_proto'}",
                        "--include_imports", f"--descriptor_set_out={out}", "order.proto"],
                       check=True)
        with open(out, "rb") as f:
            fds = descriptor_pb2.FileDescriptorSet.FromString(f.read())
    pool = descriptor_pool.DescriptorPool()
    for file_proto in fds.file:
        pool.Add(file_proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(name))


def consume_all(bootstrap: str, topic: str, expected: int, timeout_s: float = 30.0):
    """Every record of `topic` (waits for `expected`, then a little longer for extras)."""
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4().hex}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    records, deadline = [], time.time() + timeout_s
    try:
        while len(records) < expected and time.time() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                records.append(msg)
        end = time.time() + 1.5
        while time.time() < end:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                records.append(msg)
    finally:
        consumer.close()
    return sorted(records, key=lambda m: m.offset())


def consume_to_end(bootstrap: str, topic: str, expected: int, timeout_s: float = 30.0):
    """Every record of a topic whose producer has flushed (a connector's DLQ once its run
    has returned: dead_letters.py flushes a batch's letters before the table commit),
    without consume_all's fixed wait for extras (1.5 s a call) and without a consumer
    group to join. In offset order: waits for `expected` records, then reads
    each partition to its end (its high watermark when the reader gets there; a record
    landing after that is read too if it comes before the other partitions end). Extra
    records already in the topic are always returned, so `len(...) == n` checks that
    nothing more went there."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused-assign-only",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "enable.partition.eof": True})
    records, at_end = [], set()
    deadline = time.time() + timeout_s
    try:
        partitions = sorted(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
        assert partitions, f"topic {topic} has no partitions"
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        while len(records) < expected or len(at_end) < len(partitions):
            assert time.time() < deadline, (
                f"{topic}: {len(records)} of {expected} records, partitions {sorted(at_end)} "
                f"of {partitions} read to their end in {timeout_s} s")
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error() is None:
                records.append(msg)
                at_end.discard(msg.partition())
            elif msg.error().code() == KafkaError._PARTITION_EOF:
                at_end.add(msg.partition())
    finally:
        consumer.close()
    return sorted(records, key=lambda m: m.offset())  # as consume_all

def headers_of(msg) -> dict[str, str]:
    return {k: (v.decode() if v is not None else None) for k, v in (msg.headers() or [])}
