"""docs/cli.md is the command-line parser's own reference: the same text the parser
makes now (every command, its arguments, options, defaults, an example), each example
a command line the parser takes; the README links it and its command list names every
command."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from floeline import command_help
from floeline.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
SHELL = {"|", ">", ">>", "<", "&", "&&", ";"}


def test_docs_cli_md_is_what_the_parser_makes():
    written = (ROOT / "docs" / "cli.md").read_text()
    made = command_help.reference(build_parser())
    assert written == made, (f"docs/cli.md differs from the parser's reference; run "
                             f"`{command_help.REGENERATE}` and commit docs/cli.md")


def test_every_command_has_an_example_the_parser_takes():
    parser = build_parser()
    leaves = command_help.leaves(parser)
    assert set(command_help.EXAMPLES) == set(leaves), "commands and examples differ"
    for command in leaves:
        for example in command_help.EXAMPLES[command]:
            words = shlex.split(example)
            words = words[:next((i for i, w in enumerate(words) if w in SHELL), len(words))]
            assert words[0] == "floeline"
            words = words[1:words.index("--")] if "--" in words else words[1:]  # spark-submit's, as main()
            args = parser.parse_args(words)
            chosen = " ".join(filter(None, (args.command, getattr(args, "action", None)
                                            if command.count(" ") else None)))
            assert chosen == command, example


@pytest.mark.parametrize("name", [n for n, _, _ in command_help.commands(build_parser()) if " " not in n])
def test_the_readme_links_the_reference_and_names_every_command(name):
    readme = (ROOT / "README.md").read_text()
    assert "(docs/cli.md)" in readme
    everyday = readme.split("## Everyday commands", 1)[1].split("\n## ", 1)[0]
    assert re.search(rf"\bfloeline {re.escape(name)}(?![\w-])", everyday), \
        f"README's Everyday commands do not show `floeline {name}`"
