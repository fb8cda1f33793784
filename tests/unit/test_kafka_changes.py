"""Kafka topics that changed under a connector (sources/kafka_changes.py): which
partitions changed, how, where each resumes when told to go on, and the error's words."""

from floeline.sources.kafka_changes import changes_error, find_changes

OLD, NEW = "0" * 31 + "1", "0" * 31 + "2"


def changes(held, committed=None, epochs_then=None, ids_now=None, partitions_now=None,
            earliest=None, latest=None):
    return find_changes(held, committed or {}, epochs_then or {}, ids_now or {},
                        partitions_now or {}, earliest or {}, latest or {})


def test_nothing_changed():
    assert changes({("t", 0): 10}, {"t/0": "9"}, {"t": OLD}, {"t": OLD}, {"t": 1},
                   {("t", 0): 0}, {("t", 0): 10}) == []


def test_a_topic_created_again_is_told_by_its_id_even_when_it_is_longer():
    [change] = changes({("t", 0): 10}, {"t/0": "9"}, {"t": OLD}, {"t": NEW}, {"t": 1},
                       {("t", 0): 0}, {("t", 0): 25})
    assert change.channel == "t/0" and change.what.startswith("recreated: ")
    assert (change.committed, change.available, change.resume_after, change.epoch) == (
        "9", "offsets 0-24", None, NEW)


def test_a_partition_that_ends_before_the_next_offset():
    # No id recorded (a table of an older floeline): from its start when told to go on.
    [unknown] = changes({("t", 0): 10}, {"t/0": "9"}, {}, {"t": NEW}, {"t": 1},
                        {("t", 0): 0}, {("t", 0): 4})
    assert unknown.what.startswith("behind: the partition now ends at offset 4, before the next offset to read, 10")
    assert unknown.resume_after is None
    # The same topic id: truncated, so on from its new end.
    [truncated] = changes({("t", 0): 10}, {"t/0": "9"}, {"t": OLD}, {"t": OLD}, {"t": 1},
                          {("t", 0): 0}, {("t", 0): 4})
    assert "truncated" in truncated.what and truncated.resume_after == "3"


def test_gone_topics_and_partitions():
    found = changes({("a", 0): 5, ("b", 3): 7}, {"a/0": "4", "b/3": "6"}, {}, {"b": OLD}, {"b": 2})
    assert [(c.channel, c.what) for c in found] == [
        ("a/0", "gone: the topic was deleted"), ("b/3", "gone: the topic has 2 partitions now")]
    assert all(c.resume_after is None for c in found)


def test_records_deleted_before_they_were_read():
    [lost] = changes({("t", 0): 5}, {}, {"t": OLD}, {"t": OLD}, {"t": 1}, {("t", 0): 8}, {("t", 0): 10})
    assert lost.what == "lost: offsets 5-7 were deleted (retention) before they were read"
    assert lost.committed is None and lost.available == "offsets 8-9"


def test_the_error_names_partitions_offsets_and_both_ways_on():
    found = changes({("t", 0): 10, ("t", 1): 3}, {"t/0": "9", "t/1": "2"}, {"t": OLD}, {"t": NEW},
                    {"t": 2}, {("t", 0): 0, ("t", 1): 0}, {("t", 0): 0, ("t", 1): 1})
    error = changes_error("orders", found)
    text = str(error)
    assert "connector orders stopped" in text and "nothing was committed past them" in text
    assert "topic t partition 0: recreated" in text and "committed offset 9" in text
    assert "available: none (the next record will have offset 0)" in text
    assert ('PATCH /connectors/orders/offsets with {"offsets": [{"partition": {"kafka_topic": "t", '
            '"kafka_partition": 0}, "offset": null}' in text)
    assert "floeline.kafka.fail.on.data.loss=false" in text
    assert error.changes == tuple(found)
