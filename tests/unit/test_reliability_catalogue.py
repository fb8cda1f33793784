"""docs/reliability.md's failure catalogue: every row names a test, and every test it
names exists (file, and function where it names one), so the page cannot promise what
no test shows."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = re.compile(r"`((?:tests|bench)/[\w/]+\.py)((?:::\w+)?)`|`::(\w+)`")


def catalogue_rows() -> list[str]:
    text = (ROOT / "docs" / "reliability.md").read_text()
    section = text.split("## Failure catalogue", 1)[1].split("\n## ", 1)[0]
    return [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| fault")
            and not line.startswith("| ---")]


def test_the_catalogue_has_the_faults_issue_53_lists():
    faults = " ".join(row.split("|")[1] for row in catalogue_rows())
    for fault in ("process killed", "checkpoint lost", "consumer group expired", "log cleaned up",
                  "created again", "partitions added", "partition deleted", "broker down", "disk full",
                  "registry down", "concurrent writer", "unauthenticated flood"):
        assert fault in faults, fault


def test_every_row_names_tests_that_exist():
    for row in catalogue_rows():
        tests = row.split("|")[3]
        found = REFERENCE.findall(tests)
        assert found, f"no test named in: {row[:80]}"
        current = None
        for path, function, continued in found:
            if path:
                current = ROOT / path
                assert current.exists(), f"{path} does not exist"
                function = function.removeprefix("::")
            else:
                function = continued
            if function:
                assert re.search(rf"^def {function}\(", current.read_text(), re.M), f"{current.name}::{function}"
