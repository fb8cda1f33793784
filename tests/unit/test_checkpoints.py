"""When floeline writes a table's Delta checkpoint itself (pure logic, no Spark)."""

from floeline.warehouse.checkpoints import CHECKPOINT_EVERY, TABLE_CHECKPOINT_INTERVAL, checkpoint_due


def test_a_floeline_table_is_checkpointed_every_ten_commits():
    assert not checkpoint_due(CHECKPOINT_EVERY - 1, -1, TABLE_CHECKPOINT_INTERVAL)
    assert checkpoint_due(CHECKPOINT_EVERY, -1, TABLE_CHECKPOINT_INTERVAL)
    assert not checkpoint_due(25, 20, TABLE_CHECKPOINT_INTERVAL)
    assert checkpoint_due(30, 20, TABLE_CHECKPOINT_INTERVAL)
    # A checkpoint a crash lost is written after a later commit.
    assert checkpoint_due(37, 20, TABLE_CHECKPOINT_INTERVAL)


def test_a_table_with_deltas_own_cadence_is_left_to_delta():
    assert not checkpoint_due(100, -1, 10)
    assert not checkpoint_due(100, -1, 5)
    assert checkpoint_due(100, -1, 11)
