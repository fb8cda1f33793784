"""A floeline command leaves nothing of Spark's in the user's directory (issue 58):
Spark's own warehouse folder goes to floeline's cache (no Spark started here)."""

from __future__ import annotations

from pathlib import Path

from floeline import spark


def test_sparks_warehouse_folder_is_in_floelines_cache_not_the_current_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("FLOELINE_CACHE", str(tmp_path / "cache"))
    where = Path(spark.session_defaults()["spark.sql.warehouse.dir"])
    assert where == tmp_path / "cache" / "spark-warehouse"
    assert spark.driver_log_path() == tmp_path / "cache" / "spark-driver.log"
