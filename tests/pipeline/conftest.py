"""The shared pipeline over the memory source: real Spark and Delta, no broker."""

from __future__ import annotations

import os
import uuid

import pytest


@pytest.fixture(scope="session")
def spark():
    from floeline.spark import get_spark

    return get_spark()


@pytest.fixture
def warehouse(tmp_path):
    return str(tmp_path / "warehouse")


@pytest.fixture
def memory_log(tmp_path):
    from floeline.sources.memory import MemoryLog

    return MemoryLog(tmp_path / "log")


@pytest.fixture
def make_config(warehouse):
    from floeline.config import config_from_dict

    def make(**settings):
        base = {"name": f"m{uuid.uuid4().hex[:6]}", "topics": "orders",
                "floeline.warehouse": warehouse, "buffer.flush.time": "1"}
        base.update({k.replace("__", "."): str(v) for k, v in settings.items()})
        return config_from_dict(base)
    return make


@pytest.fixture
def run_memory(spark, memory_log):
    """Run a connector over the memory log until caught up."""
    from floeline.ingest import Connector
    from floeline.sources.memory import MemorySource

    def run(config):
        connector = Connector(config, spark, source=MemorySource(config, memory_log))
        connector.run(until_caught_up=True)
        return connector
    return run


@pytest.fixture
def read_table(spark, warehouse):
    def read(name, database="FLOELINE", schema="PUBLIC"):
        from floeline.warehouse.tables import read_declared

        return read_declared(spark, os.path.join(warehouse, database, schema, name))
    return read
