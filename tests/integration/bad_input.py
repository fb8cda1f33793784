"""The bad-input corpora's accounting, shared by every source: where each record a test
produced ended up. Nothing may disappear: produced == landed + DLQ + error table +
skipped by a rule, and each run prints one figure line (bench/RESULTS.md's "Bad input corpora"
table is made of these lines: `pytest -s tests/integration/test_bad_input_corpus.py`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Accounting:
    """Where a corpus run's records went. `skipped` counts records a rule chose not to
    load (behavior.on.null.values=IGNORE, a file that ON_ERROR skipped or that failed
    whole and stays in its stage)."""

    corpus: str
    kinds: int
    produced: int
    landed: int
    dlq: int = 0
    error_table: int = 0
    skipped: int = 0

    @property
    def lost(self) -> int:
        return self.produced - (self.landed + self.dlq + self.error_table + self.skipped)

    def line(self) -> str:
        return (f"bad-input {self.corpus}: kinds={self.kinds} produced={self.produced} "
                f"landed={self.landed} dlq={self.dlq} error_table={self.error_table} "
                f"skipped={self.skipped} lost={self.lost}")

    def check(self) -> None:
        """Print the figure line and insist that nothing was lost (nor counted twice)."""
        print(self.line())
        assert self.lost == 0, self.line()


def assert_each_kind_where_expected(corpus, found: dict[str, list[str]]) -> None:
    """Each corpus entry's second field is its expected destination; a record found
    nowhere, in two places or elsewhere names its kind."""
    wrong = {kind: (expected, found[kind]) for kind, expected, *_ in corpus
             if found[kind] != [expected]}
    assert not wrong, f"kinds not where expected (expected, found): {wrong}"
