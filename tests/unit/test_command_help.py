"""`floeline <command> --help`: every command names its docs page, and the defaults it
lists are the config's own (no Spark: the parser and config objects only)."""

from __future__ import annotations

import re

import pytest

from floeline import command_help
from floeline.cli import build_parser
from floeline.config import config_from_dict


def _help_of(*command: str) -> None:
    """Print `floeline COMMAND --help` (argparse exits after it)."""
    with pytest.raises(SystemExit):
        build_parser().parse_args([*command, "--help"])


@pytest.mark.parametrize("command", sorted(command_help.EPILOGS))
def test_each_command_help_lists_settings_and_names_its_docs_page(command, capsys):
    _help_of(command)
    shown = capsys.readouterr().out
    assert command_help.EPILOGS[command].splitlines()[0] in shown
    assert re.search(r"^docs: ", shown, re.M), shown
    assert "docs/" not in shown.split("docs:")[-1]  # pages by title, not repository paths


def test_produce_helps_name_their_docs_page(capsys):
    for command in (("kafka", "produce"), ("kinesis", "produce")):
        _help_of(*command)
        assert "docs: " in capsys.readouterr().out


def _listed_default(text: str, key: str) -> str:
    match = re.search(rf"^  {re.escape(key)}\s+(\S+)", text, re.M)
    assert match, f"{key} is not listed"
    return match.group(1)


def test_run_help_defaults_are_the_configs():
    config = config_from_dict({"name": "x", "topics": "t"})
    expected = {
        "bootstrap.servers": config.bootstrap_servers,
        "snowflake.database.name": config.database,
        "snowflake.schema.name": config.schema,
        "buffer.flush.time": str(config.flush_time_s),
        "buffer.count.records": str(config.count_records),
        "errors.tolerance": config.errors_tolerance,
        "errors.retry.timeout": str(int(config.retry.timeout_s * 1000)),
        "floeline.warehouse": config.warehouse,
        "floeline.spark.master": config.spark_master,
        "floeline.source": config.source,
    }
    for key, value in expected.items():
        assert _listed_default(command_help.RUN, key) == value, key


def test_worker_help_defaults_are_the_workers():
    from floeline.worker.settings import DEFAULT_LISTENER

    assert _listed_default(command_help.WORKER, "listeners") == DEFAULT_LISTENER
    assert _listed_default(command_help.WORKER, "floeline.spark.master") == "local[2]"
