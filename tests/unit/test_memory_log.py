"""The memory source's log (sources/memory.py): channels added together appear in one
save of its manifest, so a micro-batch reads all of them or none."""

import json

import pytest

from floeline.sources.memory import MemoryLog


def test_channels_added_together_appear_in_one_manifest_save(tmp_path, monkeypatch):
    log = MemoryLog(tmp_path)
    log.append("orders/0", "orders", [b'{"n": 0}'])
    saved = []
    save = log._save
    monkeypatch.setattr(log, "_save", lambda manifest: (saved.append(json.loads(json.dumps(manifest))),
                                                        save(manifest)))
    log.add_channels([("orders/1", "orders", [b'{"n": 1}', b'{"n": 2}']), ("refunds/0", "refunds", [b"{}"])])
    assert [sorted(m) for m in saved] == [["orders/0", "orders/1", "refunds/0"]]
    assert [p for p, _r in log.records("orders/1")] == ["0", "1"]
    assert log.channels()["refunds/0"]["route"] == "refunds"


def test_adding_a_channel_the_log_has_is_refused(tmp_path):
    log = MemoryLog(tmp_path)
    log.append("orders/0", "orders", [b"{}"])
    with pytest.raises(ValueError, match="orders/0 exists"):
        log.add_channels([("refunds/0", "refunds", [b"{}"]), ("orders/0", "orders", [b"{}"])])
    assert sorted(log.channels()) == ["orders/0"]  # nothing saved
