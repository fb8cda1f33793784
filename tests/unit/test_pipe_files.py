"""The pipe source's bookkeeping: batch sizes, what was handed out, offsets."""

from floeline.sources import pipe_files
from floeline.sources.pipe_files import encode_files
from floeline.warehouse import pipe_discovery
from floeline.warehouse.pipe_discovery import Discovery, decode_files
from floeline.warehouse.catalog import Warehouse
from floeline.warehouse.stage_store import StagedFile


def staged(i: int, size: int = 10) -> StagedFile:
    return StagedFile(f"f{i:04d}.json", f"file:///s/f{i:04d}.json", size, 1000 + i)


def test_files_are_handed_out_once_in_batches_of_at_most_the_limit(monkeypatch, tmp_path):
    monkeypatch.setattr(pipe_discovery, "MAX_FILES_PER_BATCH", 3)
    d = Discovery(Warehouse(tmp_path), "DB.S.P", 0.1)
    listed = [staged(i) for i in range(7)]
    assert [f.name for f in d._take(listed)] == ["f0000.json", "f0001.json", "f0002.json"]
    assert [f.name for f in d._take(listed)] == ["f0003.json", "f0004.json", "f0005.json"]
    assert [f.name for f in d._take([])] == ["f0006.json"]
    assert d._take(listed) == []  # the same listing again: nothing new
    changed = staged(2, size=11)  # replaced under its name: new content, handed out again
    assert d._take(listed[:2] + [changed]) == [changed]


def test_a_batch_offset_holds_its_files():
    files = [staged(1), staged(2)]
    assert decode_files(encode_files(files)) == files
    batch = pipe_files.arrow_batch(encode_files(files), ["receipt-1"])
    assert batch.to_pylist()[-1] == {"name": None, "location": None, "size": None, "modified_ms": None,
                                     "receipt": "receipt-1"}
    assert batch.num_rows == 3
