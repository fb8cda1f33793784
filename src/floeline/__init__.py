"""floeline: streaming ingestion from Kafka into Delta tables with the semantics of
Snowflake's Kafka connector, on PySpark Structured Streaming."""

__version__ = "0.1.0"
