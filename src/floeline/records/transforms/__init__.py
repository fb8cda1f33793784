"""Kafka Connect's Single Message Transforms (SMTs) and predicates, in plain Python.

A connector config's `transforms=a,b` / `transforms.<alias>.type=...` /
`predicates=p` / `predicates.<p>.type=...` settings become one TransformChain, built
and validated once (`transform_chain`), then applied to every record on the Spark
executors (`TransformChain.apply`). Everything here is plain picklable Python.

Records are schemaless, as with Kafka Connect's JsonConverter and
`schemas.enable=false`: a struct is a dict. The semantics follow Apache Kafka 3.9's
transforms in schemaless mode (connect/transforms), including their quirks:

- tombstones (a null value, or null key for the $Key variants) pass through
  ExtractField, InsertField, ReplaceField, Cast, Flatten and TimestampConverter;
  HoistField wraps them ({field: null}); MaskField and ValueToKey refuse them, as
  Kafka does (use a RecordIsTombstone predicate with negate=true to skip them);
- MaskField, Cast and TimestampConverter set a named field that is missing to null;
- InsertField's timestamp.field is the record timestamp as epoch milliseconds (an int),
  which is what Kafka inserts in schemaless mode.

Where floeline's Python values have no schemaless Kafka counterpart, they behave as
Kafka's schema'd values would: decimal.Decimal is a number, datetime.datetime a
Timestamp and datetime.date a Date (Cast, TimestampConverter, Flatten, MaskField).

Modules: chain (the chain built from config, the routed-topic rule), options (the one
reader of an alias's settings), registry (class names -> classes), base (what every
transform shares), fields / cast / timestamps / routing / header_transforms (the SMT
families), predicates, java_dates (java.text.SimpleDateFormat in UTC), debezium
(Debezium's ExtractNewRecordState, which also passes on the columns the change event's
schema declares: Record.field_types; any other transform that changes a value drops
them, chain.py).
"""
