"""Metric names and values as Prometheus' own text parser reads them, and the HTTP
endpoints (on the loopback, no Spark)."""

from __future__ import annotations

import urllib.error
import urllib.request
import uuid

from prometheus_client import REGISTRY, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from floeline.config import config_from_dict
from floeline.ingest.progress import BatchReport
from floeline.ops.http import OpsServer
from floeline.ingest.metrics import ConnectorMetrics, forget_connector
from floeline.sources.base import Committed, Head, Lag


def scrape_text(text: str, connector: str) -> dict[tuple[str, tuple], float]:
    """{(sample name, sorted labels without connector): value} of one connector."""
    samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.labels.get("connector") == connector:
                labels = tuple(sorted((k, v) for k, v in s.labels.items() if k != "connector"))
                samples[(s.name, labels)] = s.value
    return samples


def test_names_follow_prometheus_conventions():
    name = f"m{uuid.uuid4().hex[:6]}"
    metrics = ConnectorMetrics(name, "DB", "SC")
    metrics.committed(BatchReport(0, records_read=1, rows_written={"T": 1}, errors_by_table={"T": 1},
                                  duration_s=0.1, latency_p50_ms=10), {"t/0": "0"})
    metrics.dead_letters("T", "error_table", 1)
    metrics.table_commit_error("T")
    metrics.set_heads({"t/0": Head("0", Lag(0))})
    families = [f for f in text_string_to_metric_families(generate_latest(REGISTRY).decode())
                if f.name.startswith("floeline_")]
    kinds = {f.name: f.type for f in families}
    for family in families:
        assert family.documentation, family.name
        for sample in family.samples:
            assert "connector" in sample.labels, sample
            if family.type == "counter":
                assert sample.name.endswith("_total"), sample.name
            assert not sample.name.endswith("_created"), sample.name
    assert kinds["floeline_batch_duration_seconds"] == "histogram"
    assert kinds["floeline_end_to_end_latency_seconds"] == "histogram"
    assert {n for n, k in kinds.items() if k == "counter"} >= {
        "floeline_records_read", "floeline_table_rows_written", "floeline_table_row_errors",
        "floeline_table_dead_letter_records", "floeline_source_read_errors",
        "floeline_source_commit_errors", "floeline_table_commit_errors"}
    assert {"floeline_channel_processed_position", "floeline_channel_committed_position",
            "floeline_channel_latest_position", "floeline_channel_lag_records",
            "floeline_last_commit_timestamp_seconds", "floeline_query_active"} <= set(kinds)


def test_batches_add_up_per_channel_and_table():
    name = f"m{uuid.uuid4().hex[:6]}"
    metrics = ConnectorMetrics(name, "FLOELINE", "PUBLIC")
    metrics.started(Committed({"orders/0": "9", "orders/1": "4"}))
    metrics.processing({"orders/0": "19", "orders/1": "4"})
    before = scrape_text(generate_latest(REGISTRY).decode(), name)
    assert before[("floeline_channel_processed_position", (("channel", "orders/0"),))] == 19
    assert before[("floeline_channel_committed_position", (("channel", "orders/0"),))] == 9
    assert before[("floeline_records_read_total", ())] == 0
    metrics.committed(BatchReport(3, records_read=10, rows_written={"ORDERS": 8},
                                  errors_by_table={"ORDERS": 2}, duration_s=1.5,
                                  latency_p50_ms=2000), {"orders/0": "19"})
    metrics.committed(BatchReport(4, records_read=5, rows_written={"ORDERS": 5}, duration_s=0.2),
                      {"orders/1": "9"})
    metrics.dead_letters("ORDERS", "dlq", 2)
    metrics.set_heads({"orders/0": Head("24", Lag(5)), "orders/1": Head("9", Lag(0))})
    after = scrape_text(generate_latest(REGISTRY).decode(), name)
    orders = (("table", "FLOELINE.PUBLIC.ORDERS"),)
    assert after[("floeline_channel_committed_position", (("channel", "orders/0"),))] == 19
    assert after[("floeline_channel_committed_position", (("channel", "orders/1"),))] == 9
    assert after[("floeline_channel_latest_position", (("channel", "orders/0"),))] == 24
    assert after[("floeline_channel_lag_records", (("channel", "orders/0"),))] == 5
    assert after[("floeline_records_read_total", ())] == 15
    assert after[("floeline_table_rows_written_total", orders)] == 13
    assert after[("floeline_table_row_errors_total", orders)] == 2
    assert after[("floeline_table_dead_letter_records_total", (("destination", "dlq"),) + orders)] == 2
    assert after[("floeline_batch_duration_seconds_count", ())] == 2
    assert after[("floeline_batch_duration_seconds_bucket", (("le", "1.0"),))] == 1
    assert after[("floeline_end_to_end_latency_seconds_sum", ())] == 2.0
    assert str(metrics.lag()) == "5"


def test_forgetting_a_connector_removes_its_series_and_keeps_the_others():
    gone, kept = (f"m{uuid.uuid4().hex[:6]}" for _ in range(2))
    for name in (gone, kept):
        metrics = ConnectorMetrics(name, "FLOELINE", "PUBLIC")
        metrics.started(Committed({"orders/0": "9"}))
        metrics.committed(BatchReport(1, records_read=4, rows_written={"ORDERS": 4}, duration_s=0.1,
                                      latency_p50_ms=100), {"orders/0": "12"})
        metrics.dead_letters("ORDERS", "dlq", 1)
        metrics.table_commit_error("ORDERS")
        metrics.set_heads({"orders/0": Head("14", Lag(2))})
    forget_connector(gone)
    text = generate_latest(REGISTRY).decode()
    assert scrape_text(text, gone) == {}
    assert f'connector="{gone}"' not in text
    kept_series = scrape_text(text, kept)
    assert kept_series[("floeline_records_read_total", ())] == 4
    assert kept_series[("floeline_channel_lag_records", (("channel", "orders/0"),))] == 2
    forget_connector(gone)  # twice, or a connector never run: nothing to do


def get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.headers["Content-Type"], r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers["Content-Type"], e.read().decode()


def test_endpoints_answer_metrics_and_probes():
    name = f"m{uuid.uuid4().hex[:6]}"
    ConnectorMetrics(name, "DB", "SC").query_active(True)
    state = {"ready": (False, "behind: lag 7 records > 5")}
    scrapes = []
    server = OpsServer("127.0.0.1", 0, lambda: (True, "active"), lambda: state["ready"],
                       before_scrape=lambda: scrapes.append(1)).start()
    base = f"http://127.0.0.1:{server.port}"
    try:
        status, content_type, body = get(base + "/metrics")
        assert status == 200 and content_type.startswith("text/plain; version=0.0.4")
        assert scrape_text(body, name)[("floeline_query_active", ())] == 1 and scrapes == [1]
        assert get(base + "/healthz")[::2] == (200, "active\n")
        assert get(base + "/ready")[::2] == (503, "behind: lag 7 records > 5\n")
        state["ready"] = (True, "caught up: lag 0")
        assert get(base + "/ready")[::2] == (200, "caught up: lag 0\n")
        assert get(base + "/nope")[0] == 404
    finally:
        server.close()


def test_metrics_settings():
    base = {"name": "x", "topics": "a"}
    assert config_from_dict(base).metrics.port is None
    cfg = config_from_dict({**base, "floeline.metrics.port": "9464", "buffer.count.records": "50"})
    assert (cfg.metrics.port, cfg.metrics.host, cfg.metrics.ready_max_lag) == (9464, "0.0.0.0", 50)
    cfg = config_from_dict({**base, "floeline.metrics.port": "0", "floeline.metrics.host": "127.0.0.1",
                            "floeline.metrics.ready.max.lag": "0"})
    assert (cfg.metrics.port, cfg.metrics.host, cfg.metrics.ready_max_lag) == (0, "127.0.0.1", 0)
