"""`pip install floeline` installs what running a connector needs; the extras add the
rest ([aws-local]: moto's server, [protobuf]: grpcio-tools, [test]). What a user without
an extra or without node meets: a message naming what needs it and the command that
adds it, never an ImportError's traceback. Missing packages are simulated by blocking
their import in this process (sys.modules[name] = None), as Python reports a package
that is not installed."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import pytest

from floeline.config import config_from_dict
from floeline.config.decoding import PROTOBUF_CONVERTER
from floeline.dev import aws as devaws
from floeline.dev.services import free_port
from floeline.errors import ConfigError, SetupError, missing_extra

ROOT = Path(__file__).resolve().parents[2]


def blocked(monkeypatch, *modules: str) -> None:
    for name in modules:
        monkeypatch.setitem(sys.modules, name, None)


def test_a_missing_extra_is_named_with_its_install_command(monkeypatch, tmp_path):
    assert missing_extra("json", "x", "y") is None
    blocked(monkeypatch, "moto")
    said = devaws.moto_missing()
    assert said.startswith("the local DynamoDB, S3, SQS and Firehose (moto's server) needs the Python "
                           "package of floeline's [aws-local] extra")
    assert "pip install 'floeline[aws-local]'" in said
    with pytest.raises(SetupError, match=r"pip install 'floeline\[aws-local\]'"):
        devaws._check_can_launch(devaws.MOTO, tmp_path, free_port())  # before anything starts


def test_the_protobuf_converter_without_grpcio_tools_is_a_config_error_at_validate(monkeypatch):
    settings = {"name": "c", "topics": "t", "value.converter": PROTOBUF_CONVERTER,
                "value.converter.schema.registry.url": "http://localhost:8081"}
    config_from_dict(settings)  # installed here: valid
    blocked(monkeypatch, "grpc_tools")
    with pytest.raises(ConfigError, match=r"value.converter=io.confluent.connect.protobuf.ProtobufConverter "
                                          r"needs .*pip install 'floeline\[protobuf\]'"):
        config_from_dict(settings)


def test_setup_without_node_says_kinesis_was_skipped_and_how_to_add_it(tmp_path, monkeypatch):
    monkeypatch.setenv("FLOELINE_CACHE", str(tmp_path))  # kinesis-local not installed there
    line = devaws.kinesis_local_skipped(which=lambda tool: None if tool == "node" else "/usr/bin/npm")
    assert line == ("kinesis-local: skipped, node not on PATH (Kafka needs neither; the local Kinesis "
                    "of `floeline aws start` and the Kinesis demo do): to add it, install Node.js and "
                    "npm (`apt-get install nodejs npm`), then run `floeline setup` again")
    assert "\n" not in line
    assert devaws.kinesis_local_skipped(which=lambda tool: f"/usr/bin/{tool}") is None


def test_the_package_alone_leaves_the_extras_out_and_the_test_extra_holds_what_tests_import():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = {dep.split("==")[0].split("[")[0] for dep in project["dependencies"]}
    assert not names & {"moto", "grpcio-tools", "pytest", "duckdb", "polars", "deltalake", "pyiceberg"}, names
    extras = project["optional-dependencies"]
    assert extras["aws-local"] == ["moto[server]==5.2.5"] and extras["protobuf"] == ["grpcio-tools==1.85.1"]
    assert extras["iceberg"] == ["pyiceberg[pyarrow]==0.12.0"]
    test = {dep.split("==")[0] for dep in extras["test"]}
    assert {"floeline[aws-local,protobuf,iceberg]", "pytest", "duckdb", "polars", "deltalake"} <= test
    # every pin of the package and its extras is the one make setup installs
    def normal(name: str) -> str:
        return name.split("[")[0].strip().lower().replace("_", "-")

    locked = {normal(name): version for name, version in
              (line.split("==", 1) for line in (ROOT / "requirements.lock").read_text().splitlines()
               if "==" in line and not line.startswith("#"))}
    for dep in [*project["dependencies"], *(d for group in extras.values() for d in group)]:
        if "==" in dep:
            name, version = dep.split("==")
            assert locked.get(normal(name)) == version, dep
