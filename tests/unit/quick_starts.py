"""The quick starts of the README and docs/, read from their Markdown: what
tests/integration/test_quick_starts.py runs and tests/unit/test_quick_start_docs.py
checks, so the pages cannot drift from the product.

A fenced block belongs to a quick start when an HTML comment names it just before the
fence (invisible on the rendered page):

    <!-- quickstart kafka: file orders.properties -->    the block is saved as that file
    <!-- quickstart kafka: file orders.properties = examples/orders.properties -->
                                                       ... and must equal that file of the repo
    <!-- quickstart kafka, kinesis: file orders.jsonl -->   one block, several quick starts
    <!-- quickstart kafka: run -->                       shell commands, run in order

A quick start is its blocks in page order: the README first, then docs/*.md by name.
Every quick start runs in an empty directory of its own."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"^<!--\s*quickstart\s+(?P<names>[\w-]+(?:\s*,\s*[\w-]+)*)\s*:\s*"
                    r"(?:(?P<run>run)|file\s+(?P<path>\S+)(?:\s*=\s*(?P<same_as>\S+))?)\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    names: tuple[str, ...]
    kind: str  # "file" | "run"
    text: str  # the block's lines, each ending in a newline
    page: str  # README.md, docs/worker.md
    line: int  # the marker's line on the page
    path: str | None = None  # kind "file": where it is saved
    same_as: str | None = None  # a repository file it must equal

    def where(self) -> str:
        return f"{self.page}:{self.line}"


def pages(root: Path = ROOT) -> list[Path]:
    return [root / "README.md"] + sorted((root / "docs").glob("*.md"))


def marked_blocks(page: Path, root: Path = ROOT) -> list[Block]:
    """Every marked block of `page`; a marker not followed by a fence is an error."""
    lines = page.read_text(encoding="utf-8").splitlines(keepends=True)
    name = str(page.relative_to(root))
    found = []
    for at, line in enumerate(lines):
        match = MARKER.match(line.strip())
        if not match:
            if line.lstrip().startswith("<!-- quickstart"):
                raise AssertionError(f"{name}:{at + 1}: a quickstart marker this module cannot read: {line!r}")
            continue
        if at + 1 >= len(lines) or not lines[at + 1].startswith("```"):
            raise AssertionError(f"{name}:{at + 1}: a quickstart marker must sit just above a ``` fence")
        end = next((i for i in range(at + 2, len(lines)) if lines[i].startswith("```")), None)
        if end is None:
            raise AssertionError(f"{name}:{at + 2}: the fence is never closed")
        names = tuple(n.strip() for n in match["names"].split(","))
        found.append(Block(names, "run" if match["run"] else "file", "".join(lines[at + 2:end]),
                           name, at + 1, match["path"], match["same_as"]))
    return found


def quick_starts(root: Path = ROOT) -> dict[str, list[Block]]:
    """Each quick start's blocks, in page order."""
    starts: dict[str, list[Block]] = {}
    for page in pages(root):
        for block in marked_blocks(page, root):
            for name in block.names:
                starts.setdefault(name, []).append(block)
    return starts


def commands(run_text: str) -> list[str]:
    """The shell commands of a run block, in order: a command goes on over the next
    lines while a quote is open or a line ends in `\\`; blank and comment lines are none."""
    found, pending = [], ""
    for line in run_text.splitlines():
        pending = f"{pending}\n{line}" if pending else line
        if pending.endswith("\\"):
            continue
        try:
            words = shlex.split(pending, comments=True)
        except ValueError:  # a quote still open: the command goes on
            continue
        if words:
            found.append(pending.strip())
        pending = ""
    if pending.strip():
        raise AssertionError(f"a command is never closed: {pending!r}")
    return found


def is_background(command: str) -> bool:
    """`floeline worker &`: a command the user leaves running while they go on."""
    return _code(command).rstrip().endswith("&")


def _code(command: str) -> str:
    """The command without its trailing comment."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.commenters = "#"
    lexer.whitespace_split = True
    return " ".join(lexer)


def section_blocks(page: Path, heading: str) -> list[tuple[int, str]]:
    """(line, first line) of every fenced block under each `## heading...` of `page`,
    up to the next `## `; the line is the fence's."""
    lines = page.read_text(encoding="utf-8").splitlines()
    found, inside, fenced = [], False, False
    for at, line in enumerate(lines):
        if line.startswith("## "):
            inside = line.startswith(f"## {heading}")
        if line.startswith("```"):
            if not fenced and inside:
                found.append((at + 1, line))
            fenced = not fenced
    return found
