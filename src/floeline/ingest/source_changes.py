"""What the connector does when its source changed under it (Source.changed: a Kafka
topic deleted and created again, a partition gone or ending before its committed
offset, records deleted before they were read): stop with the error that names each
channel, its positions and the fix (the default), or, with
floeline.kafka.fail.on.data.loss=false, move those channels on and go on.

Moving on is an offsets change (warehouse/offsets_changes.py), as the worker's offsets
API makes one: a commit of no rows per table, resuming each channel where the change
says (a recreated topic at its first record) with its route's new epoch, its record
naming the connector, the setting and the reason, so DESCRIBE HISTORY shows it. The
Spark checkpoint, whose offsets are the old ones, is set aside, and the query starts
again from the tables' positions."""

from __future__ import annotations

import logging

from floeline.errors import SourceChanged
from floeline.ingest.checkpoint_guard import set_aside
from floeline.warehouse.offsets_changes import OffsetsChange, changed_positions, commit_offsets_change

log = logging.getLogger("floeline")

SETTING = "floeline.kafka.fail.on.data.loss"


def follow(pipeline, changed: SourceChanged) -> None:
    """Raise `changed` unless the config says to go on; else move its channels on in
    their tables and set the checkpoint aside (the caller starts the query again). A
    change with no channels (lost data the tables' positions do not explain: a partition
    that had committed nothing) sets the checkpoint aside alone."""
    config = pipeline.config
    checkpoint = config.checkpoint_dir
    if config.fail_on_data_loss:
        raise changed
    if not changed.changes:  # the checkpoint's own offsets are what is stale
        log.warning("connector %s: %s; %s=false: it starts again from its tables' positions",
                    config.name, changed, SETTING)
        set_aside(pipeline.warehouse.storage_for(checkpoint), checkpoint, config.name, f"{SETTING}=false")
        return
    reason = "; ".join(f"{c.channel}: {c.what}" for c in changed.changes)
    log.warning("connector %s: its source changed under it (%s); %s=false: each resumes at its "
                "first record (a truncated one at its new end), recorded in its table's history",
                config.name, reason, SETTING)
    change = OffsetsChange(f"connector {config.name} ({SETTING}=false)", "alter", reason)
    by_table: dict[str, tuple] = {}
    for c in changed.changes:
        state = pipeline.tables.state(pipeline.table_of_route(c.route))
        _state, positions, epochs = by_table.setdefault(state.ref.full_name, (state, {}, {}))
        positions[c.channel] = c.resume_after
        if c.epoch is not None:
            epochs[c.route] = c.epoch
    for state, positions, epochs in by_table.values():
        if not pipeline.warehouse.is_table(state.ref):
            continue  # nothing committed there: the checkpoint below is all there is to move
        after = changed_positions(state.committed, change, positions, epochs=epochs)
        commit_offsets_change(pipeline.spark, state.ref, config.name, state.committed, after, change)
        state.committed_through(after)
    set_aside(pipeline.warehouse.storage_for(checkpoint), checkpoint, config.name,
              f"{SETTING}=false moved its channels on")
