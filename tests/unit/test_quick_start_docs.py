"""The quick starts as the pages show them (no Spark, no broker): every block of a
README quick start is one the integration test runs, the pages agree on the files they
share, and the README's connector config is examples/orders.properties as it is.
Running them: tests/integration/test_quick_starts.py."""

from __future__ import annotations

import pytest

from quick_starts import ROOT, commands, is_background, pages, quick_starts, section_blocks


def test_every_block_of_a_quick_start_section_is_run_by_the_test():
    marked = {(block.page, block.line + 1) for blocks in quick_starts().values() for block in blocks}
    unmarked = []
    for page in pages():  # the fence is the line after its marker
        name = page.relative_to(ROOT).as_posix()
        unmarked += [f"{name}:{line} {fence}" for line, fence in section_blocks(page, "Quick start")
                     if (name, line) not in marked]
    assert not unmarked, f"mark these with <!-- quickstart NAME: run|file PATH --> (quick_starts.py): {unmarked}"


def test_each_quick_start_runs_something_and_saves_no_file_twice_differently():
    starts = quick_starts()
    assert {"kafka", "kinesis", "stages", "worker"} <= set(starts)
    for name, blocks in starts.items():
        assert any(b.kind == "run" for b in blocks), f"quick start {name} has no run block"
        saved = {}
        for block in (b for b in blocks if b.kind == "file"):
            first = saved.setdefault(block.path, block)
            assert block.text == first.text, (
                f"quick start {name}: {block.path} differs between {first.where()} and {block.where()}")


def test_files_that_name_a_repository_file_are_that_file():
    checked = 0
    for blocks in quick_starts().values():
        for block in (b for b in blocks if b.same_as):
            assert block.text == (ROOT / block.same_as).read_text(encoding="utf-8"), (
                f"{block.where()}: the block is not {block.same_as} as it is")
            checked += 1
    assert checked >= 2  # README's and docs/kafka.md's orders.properties


def test_the_readme_config_is_the_4x_connector():
    text = (ROOT / "examples" / "orders.properties").read_text(encoding="utf-8")
    assert "connector.class=com.snowflake.kafka.connector.SnowflakeStreamingSinkConnector\n" in text


def test_quick_start_commands_are_what_a_user_types():
    for name, blocks in quick_starts().items():
        for block in (b for b in blocks if b.kind == "run"):
            for command in commands(block.text):
                assert ".venv/" not in command, (
                    f"{block.where()}: quick starts run from any directory: `floeline`, not .venv/bin/floeline")


def test_commands_go_on_while_a_quote_is_open_and_comments_are_not_commands():
    text = ("floeline kafka start   # a broker\n\n# a note\ncurl -s -X POST $W -d '{\n  \"name\": \"o\"}'\n"
            "floeline worker &   # serves\n")
    assert commands(text) == ["floeline kafka start   # a broker", "curl -s -X POST $W -d '{\n  \"name\": \"o\"}'",
                              "floeline worker &   # serves"]
    assert is_background("floeline worker &   # serves")
    assert not is_background("mkdir landing && echo x > landing/a.json   # & in a comment")
    with pytest.raises(AssertionError, match="never closed"):
        commands("curl -d '{\n")


def test_pages_are_the_readme_then_docs():
    names = [p.relative_to(ROOT).as_posix() for p in pages()]
    assert names[0] == "README.md" and all(n.startswith("docs/") for n in names[1:])
