"""The dev broker's start error says why a start can be slow (pure logic, no broker)."""

from floeline.dev.kafka import _data_hint


def test_a_large_data_directory_is_named_with_its_size_and_the_fix(tmp_path):
    for partition in ("orders-0", "orders-1"):
        (tmp_path / "data" / partition).mkdir(parents=True)
        (tmp_path / "data" / partition / "00000000000000000000.log").write_bytes(b"x" * 600)
    (tmp_path / "data" / "meta.properties").write_text("version=1\n")

    hint = _data_hint(tmp_path, large_bytes=1000)

    assert "2 topic partitions" in hint
    assert str(tmp_path / "data") in hint
    assert "make clean" in hint


def test_a_small_or_missing_data_directory_adds_nothing(tmp_path):
    assert _data_hint(tmp_path) == ""
    (tmp_path / "data" / "orders-0").mkdir(parents=True)
    assert _data_hint(tmp_path) == ""
