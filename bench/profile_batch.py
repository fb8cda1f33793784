"""Where a big micro-batch spends its time: floeline's phases (FLOELINE_PROFILE=1) on
N records, for tuning. Not a benchmark with a baseline; see bench_ingest.py for that."""

import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
os.environ["FLOELINE_PROFILE"] = "1"

from bench_ingest import PARTITIONS, floeline_job, produce_records  # noqa: E402
from floeline.dev import kafka as devkafka  # noqa: E402
from floeline.spark import get_spark  # noqa: E402

records = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
bootstrap = devkafka.start()
topic = f"profile_{int(time.time())}"
devkafka.create_topic(bootstrap, topic, partitions=PARTITIONS)
produce_records(bootstrap, topic, records)
spark = get_spark()
out = tempfile.mkdtemp(prefix="floeline-profile-")
floeline_job(spark, bootstrap, topic, out, int(sys.argv[2]) if len(sys.argv) > 2 else records)
