"""Sources: each module knows one system's channels and reads them as a Spark
streaming DataFrame in the normalized layout (base.py). `source_for` picks the
implementation a config names (floeline.source)."""

from __future__ import annotations


def source_for(config):
    """The Source for `config.source` ("kafka" or "kinesis")."""
    if config.source == "kinesis":
        from floeline.sources.kinesis.source import KinesisSource

        return KinesisSource(config)
    from floeline.sources.kafka import KafkaSource

    return KafkaSource(config)
