"""When floeline writes a table's Delta checkpoint itself (pure logic, no Spark)."""

from floeline.warehouse.checkpoints import CHECKPOINT_EVERY, TABLE_CHECKPOINT_INTERVAL, checkpoint_due


def test_a_floeline_table_is_checkpointed_every_hundred_commits():
    assert CHECKPOINT_EVERY == 100 < TABLE_CHECKPOINT_INTERVAL
    assert not checkpoint_due(99, -1, TABLE_CHECKPOINT_INTERVAL)
    assert checkpoint_due(100, -1, TABLE_CHECKPOINT_INTERVAL)
    assert not checkpoint_due(250, 200, TABLE_CHECKPOINT_INTERVAL)
    assert checkpoint_due(300, 200, TABLE_CHECKPOINT_INTERVAL)
    # A checkpoint a crash lost is written after a later commit.
    assert checkpoint_due(370, 200, TABLE_CHECKPOINT_INTERVAL)


def test_a_table_with_deltas_own_cadence_is_left_to_delta():
    assert not checkpoint_due(500, -1, 10)
    assert not checkpoint_due(500, -1, 100)
    assert checkpoint_due(500, -1, 101)
