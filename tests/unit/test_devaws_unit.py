"""`floeline aws`'s pure parts: port settings, printed lines, and what a machine without
kinesis-local, node or npm is told (no process is started)."""


import pytest

from floeline.dev.services import free_port
from floeline.dev import aws as devaws
from floeline.dev.services import port_from_env
from floeline.errors import FloelineError, SetupError


def test_port_from_env(monkeypatch):
    monkeypatch.delenv("FLOELINE_KINESIS_PORT", raising=False)
    assert port_from_env("FLOELINE_KINESIS_PORT", 4568) == 4568
    monkeypatch.setenv("FLOELINE_KINESIS_PORT", "")
    assert port_from_env("FLOELINE_KINESIS_PORT", 4568) == 4568
    monkeypatch.setenv("FLOELINE_KINESIS_PORT", "14568")
    assert port_from_env("FLOELINE_KINESIS_PORT", 4568) == 14568


@pytest.mark.parametrize("raw", ["abc", "0", "65536", "-1", "45 68"])
def test_port_from_env_rejects_non_ports(monkeypatch, raw):
    monkeypatch.setenv("FLOELINE_MOTO_PORT", raw)
    with pytest.raises(FloelineError, match="FLOELINE_MOTO_PORT=.*is not a TCP port.*default 5000"):
        port_from_env("FLOELINE_MOTO_PORT", 5000)


def test_endpoint_lines():
    endpoints = {"kinesis": "http://127.0.0.1:4568", "dynamodb": "http://127.0.0.1:5000"}
    assert devaws.endpoint_lines(endpoints) == ["kinesis.endpoint=http://127.0.0.1:4568",
                                                "dynamodb.endpoint=http://127.0.0.1:5000"]


def test_start_without_kinesis_local_says_run_setup(tmp_path, monkeypatch):
    monkeypatch.setenv("FLOELINE_CACHE", str(tmp_path / "cache"))
    with pytest.raises(SetupError,
                       match=r"kinesis-local .*not installed.*floeline setup.*make setup"):
        devaws.start(tmp_path / "aws", kinesis_port=free_port(), moto_port=free_port())
    assert not list((tmp_path / "aws").glob("*.pid"))


def test_setup_without_npm_names_the_install_command(tmp_path, monkeypatch):
    monkeypatch.setenv("FLOELINE_CACHE", str(tmp_path))
    monkeypatch.setattr(devaws.shutil, "which",
                        lambda tool: None if tool == "npm" else f"/usr/bin/{tool}")
    with pytest.raises(SetupError, match="`npm` is not on PATH.*apt-get install nodejs npm"):
        devaws.install_kinesis_local()


def test_setup_skips_an_installed_kinesis_local(tmp_path, monkeypatch):
    monkeypatch.setenv("FLOELINE_CACHE", str(tmp_path))
    home = devaws.kinesis_local_dir()
    home.mkdir(parents=True)
    (home / ".floeline-complete").write_text(devaws.KINESIS_LOCAL_VERSION)
    monkeypatch.setattr(devaws.subprocess, "run", lambda *a, **k: pytest.fail("ran npm"))
    assert devaws.install_kinesis_local() == home
