"""A Spark checkpoint never overrides an offsets change.

Spark resumes a streaming query from its checkpoint's offsets, not from the positions
the tables hold; after an offsets change (worker/offsets.py) those differ on purpose.
Each change has an id that the tables' commits carry (warehouse/offsets_changes.py),
and beside the checkpoint a marker file lists the change ids the checkpoint was made
after. At start, a checkpoint whose marker lacks one of the tables' change ids
predates that change: it is deleted, and the query starts as it does without one,
each channel right after the position its table holds.

Crash-safe in every order: the change is in the table before anything here runs; the
marker is deleted before the checkpoint and written again only after it is gone, so a
crash at any point leaves either no checkpoint or one whose marker still lacks the
change, and the next start sets it aside again."""

from __future__ import annotations

import json
import logging

from floeline.config import locations

log = logging.getLogger("floeline")

MARKER = "floeline-offsets-changes.json"


def marker_location(checkpoint: str) -> str:
    return locations.join(checkpoint, MARKER)


def read_marker(files, checkpoint: str) -> set[str]:
    """The change ids a checkpoint was made after (none when it has no marker)."""
    text = files.read_text(marker_location(checkpoint))
    if not text:
        return set()
    try:
        return {str(c) for c in json.loads(text).get("changes", [])}
    except (ValueError, AttributeError, TypeError):
        return set()  # unreadable: treated as made before every change


def write_marker(files, checkpoint: str, changes: set[str]) -> None:
    files.write_text(marker_location(checkpoint), json.dumps({"changes": sorted(changes)}))


def checkpoint_follows_changes(files, checkpoint: str, changes: set[str], has_checkpoint: bool,
                               connector: str) -> bool:
    """Make the checkpoint at `checkpoint` agree with the tables' offsets `changes`:
    delete it when it was made before one of them. Returns whether a checkpoint is
    left to resume from."""
    if not has_checkpoint:
        if changes and read_marker(files, checkpoint) != changes:
            write_marker(files, checkpoint, changes)
        return False
    missing = changes - read_marker(files, checkpoint)
    if not missing:
        return True
    log.warning("connector %s: its Spark checkpoint %s was made before the offsets change %s "
                "of its tables; it is set aside and the connector resumes from the positions "
                "its tables hold", connector, checkpoint, ", ".join(sorted(missing)))
    files.delete(marker_location(checkpoint))
    files.delete_tree(checkpoint)
    write_marker(files, checkpoint, changes)
    return False


def set_aside(files, checkpoint: str, connector: str, why: str) -> None:
    """Delete the checkpoint at `checkpoint` (its offsets are no longer where the
    connector must resume, `why`): the query then starts from the tables' positions.
    The marker goes first, as above."""
    log.warning("connector %s: its Spark checkpoint %s is set aside (%s); the connector "
                "resumes from the positions its tables hold", connector, checkpoint, why)
    files.delete(marker_location(checkpoint))
    files.delete_tree(checkpoint)
