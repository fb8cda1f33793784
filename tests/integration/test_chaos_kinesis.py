"""The Kinesis chaos soak (bench/chaos_kinesis.py), shortened: 20,000 records over 3
streams (5 shards, KPL-aggregated) into 3 tables with schema evolution and bad records
(plain and inside aggregates), `floeline run` processes SIGKILLed 3 times (at table
creation, at a schema change and at one more moment), a shard split while a connector
runs and the Spark checkpoint deleted once. Every user record must end in its table or
its error table exactly once.

The soak starts a local Kinesis and DynamoDB of its own, never the session's."""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from chaos_kinesis import Options, plan_cycles, report, run_soak  # noqa: E402

pytestmark = pytest.mark.integration


def test_kinesis_plan_puts_each_fault_where_it_was_asked():
    cycles = plan_cycles(Options(kills=10, splits=1, checkpoint_deletes=1))
    assert cycles[0].moment == "create" and cycles[-1].moment == "final"
    assert sum(c.split for c in cycles) == 1 and sum(c.delete_checkpoint for c in cycles) == 1
    assert sum(c.users_start for c in cycles) == 1
    assert {c.moment for c in cycles} == {"create", "evolve", "commit", "write", "progress",
                                          "random", "final"}
    assert all(c.new_key for c in cycles if c.moment == "evolve")
    assert not any(c.split and c.moment in ("create", "evolve", "final") for c in cycles)


@pytest.mark.skipif(os.environ.get("FLOELINE_CHAOS_TESTS") != "1",
                    reason="several connector launches and kills, a shard split (10-25 minutes on "
                           "a 2-core machine): set FLOELINE_CHAOS_TESTS=1")
def test_short_kinesis_chaos_soak_is_exactly_once(spark, tmp_path):
    log = io.StringIO()
    options = Options(records=20_000, kills=3, splits=1, checkpoint_deletes=1, per_aggregate=50,
                      batch_records=1000, seed=7, workdir=str(tmp_path / "kchaos"), log=log)
    result = run_soak(options, spark=spark)
    report(result, log)
    text = log.getvalue()
    print(text)  # the per-table figures (pytest -s or -rP shows them)
    assert result.kills == 3 and result.splits == 1 and result.checkpoint_deletes == 1, text
    assert not result.crashes, text
    assert result.total("produced") == 20_000, text
    assert result.total("duplicates") == 0 and result.total("lost") == 0, text
    assert result.total("unexpected") == 0 and result.total("misrouted") == 0, text
    assert result.total("dlq") == sum(t.bad_produced for t in result.tables) > 0, text
    assert result.total("landed") + result.total("dlq") == 20_000, text
    assert len(result.tables) == 3 and all(t.landed > 0 for t in result.tables), text
