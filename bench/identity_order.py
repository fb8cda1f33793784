"""What writing AUTOINCREMENT tables in offset order costs (ingest/identity_order.py):
one connector run over N records (4 partitions, 2 batches) into a new plain table
(twice, after a warm-up) and into a table with an AUTOINCREMENT column; run it with
PYTHONPATH pointing at this tree's src/ and at an earlier commit's to compare. Prints
one JSON line per table. Not a benchmark with a baseline of its own."""
import json
import os
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
from floeline.dev import kafka as devkafka
from floeline.spark import get_spark
from floeline.config import config_from_dict
from floeline.ingest import Connector
from floeline.sources.kafka import produce
from floeline.sql.script import run_script
from floeline.warehouse.catalog import Warehouse

n = int(sys.argv[1]); state = tempfile.mkdtemp()
from floeline.dev.services import free_port
bootstrap = devkafka.start(state, free_port())
spark = get_spark()
try:
    for label in ("warmup", "plain", "plain2", "identity"):
        topic = f"m_{label}_{uuid.uuid4().hex[:6]}"
        devkafka.create_topic(bootstrap, topic, partitions=4)
        produce(bootstrap, topic, [{"value": {"id": i, "name": f"n{i}", "score": i / 3, "ok": True}, "partition": i % 4} for i in range(n)])
        wh = tempfile.mkdtemp()
        if label == "identity":
            run_script(spark, f"CREATE TABLE {topic.upper()} (ROW_ID NUMBER AUTOINCREMENT, RECORD_METADATA VARIANT, ID NUMBER, NAME VARCHAR, SCORE FLOAT, OK BOOLEAN) ENABLE_SCHEMA_EVOLUTION = TRUE", Warehouse(wh))
        cfg = config_from_dict({"name": f"c{uuid.uuid4().hex[:6]}", "bootstrap.servers": bootstrap, "topics": topic,
                                "floeline.warehouse": wh, "buffer.flush.time": "1", "buffer.count.records": str(n // 8)})
        c = Connector(cfg, spark, out=open("/dev/null", "w"))
        t = time.time(); c.run(until_caught_up=True); total = time.time() - t
        steady = [r.duration_s for r in c.reports[1:] if r.records_read]
        print(json.dumps({"label": label, "total_s": round(total, 2), "batches": len(c.reports),
                          "steady_batch_s": round(sum(steady) / max(1, len(steady)), 3),
                          "one_pass": sum("one pass" in r.phases for r in c.reports)}), flush=True)
finally:
    devkafka.stop(state)
