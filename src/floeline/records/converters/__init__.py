"""Kafka Connect converters: a record's key or value bytes -> the Python value Kafka
Connect's converter would hand to the transforms (see record.py for the types), and
the spec's conversion rules from that value to JSON text (`to_json_text`).

Converters, by the class name a connector config gives in `key.converter` /
`value.converter` (options come from `<key|value>.converter.<option>`):

  org.apache.kafka.connect.json.JsonConverter         JSON; with schemas.enable (Kafka
      Connect's default: true) the {"schema", "payload"} envelope, whose schema is
      applied (Decimal, Date, Time, Timestamp logical types, bytes, maps with
      non-string keys)
  org.apache.kafka.connect.storage.StringConverter    text (converter.encoding, UTF-8)
  org.apache.kafka.connect.converters.ByteArrayConverter   the bytes as they are
  io.confluent.connect.avro.AvroConverter             Confluent wire format + Avro
  io.confluent.connect.protobuf.ProtobufConverter     Confluent wire format + Protobuf
  io.confluent.connect.json.JsonSchemaConverter       Confluent wire format + JSON

The three Snowflake converters (SnowflakeJsonConverter, SnowflakeAvroConverter,
SnowflakeAvroConverterWithoutSchemaRegistry) are refused: the spec says the connector
with Snowpipe Streaming does not support them (their errors go to a table stage, which
conflicts with the dead-letter queue); the message names the community converter to
use instead.

Schemas of the Confluent formats come from the schema registry named by
`<key|value>.converter.schema.registry.url` (GET /schemas/ids/{id}); a registry client
caches every parsed schema (on executors, one client per worker process and registry
spec). A record that cannot be converted
raises ConverterError with its stage ('key converter' / 'value converter') and the
reason; never a silent NULL.

The settings are read and checked with the config (config/decoding.py: the class names,
ConverterSpec). Modules: factory (a spec -> its converter), base (Converter, Converted,
the errors, the stage names),
text_and_bytes, connect_json, wire_format (Confluent framing, the registry-backed
converter base), avro, protobuf, json_schema, schema_registry (the HTTP client with its
retries). A value -> JSON text is records/json_text.py.
"""
