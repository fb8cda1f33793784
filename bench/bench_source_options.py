"""floeline's connector with two sets of Kafka source options, in alternating runs of one
process: how a change to sources/kafka.py's SPARK_SOURCE_OPTIONS is measured against
the options before it (the same-run baseline).

1. Produces --records of bench_ingest.py's ~236-byte records to a 4-partition topic
   (or reads --topic, already produced) and a small warm-up topic.
2. Warms both option sets up on the warm-up topic, then runs the connector end to end
   (--until-caught-up, bench_ingest.py's floeline_job: buffer.count.records 100,000 a
   partition) --rounds times with each set, alternating which goes first.

    .venv/bin/python bench/bench_source_options.py --before '{"kafka.fetch.max.wait.ms": "0"}'
        [--after '<JSON>'] [--records 1000000] [--rounds 3]

--after defaults to SPARK_SOURCE_OPTIONS as it is now. Last line: before_s=[...] after_s=[...]
best_before_s=N best_after_s=N ratio=R (best before / best after: above 1, the after
options are faster).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
sys.path.insert(0, os.path.dirname(__file__))

from bench_ingest import PARTITIONS, floeline_job, produce_records  # noqa: E402

from floeline.dev import kafka as devkafka  # noqa: E402
from floeline.sources import kafka as kafka_source  # noqa: E402
from floeline.spark import get_spark  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", required=True, help="the baseline's options, as JSON")
    parser.add_argument("--after", help="the options measured, as JSON (default: floeline's own)")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--topic", help="a topic already holding the records (skips producing)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    options = {"before": json.loads(args.before),
               "after": json.loads(args.after) if args.after else dict(kafka_source.SPARK_SOURCE_OPTIONS)}

    bootstrap = devkafka.start()
    topic = args.topic
    if not topic:
        topic = f"bench_options_{int(time.time())}_{random.randint(0, 999)}"
        devkafka.create_topic(bootstrap, topic, partitions=PARTITIONS)
        produce_records(bootstrap, topic, args.records)
    warm = f"{topic}_warmup"
    devkafka.create_topic(bootstrap, warm, partitions=PARTITIONS)
    produce_records(bootstrap, warm, 50_000)
    spark = get_spark()
    out_dir = tempfile.mkdtemp(prefix="floeline-bench-options-")

    def run(name: str, label: str) -> float:
        # The source reads the module's SPARK_SOURCE_OPTIONS when it opens its stream.
        kafka_source.SPARK_SOURCE_OPTIONS = options[name]
        started = time.time()
        floeline_job(spark, bootstrap, topic if label else warm, os.path.join(out_dir, f"{name}{label}"), 100_000)
        return time.time() - started

    for name in options:
        run(name, "")
    times: dict[str, list[float]] = {name: [] for name in options}
    for round_no in range(args.rounds):
        order = ("before", "after") if round_no % 2 == 0 else ("after", "before")
        for name in order:
            times[name].append(round(run(name, f"_round{round_no}"), 1))
            print(f"round {round_no + 1} {name} {options[name]}: {times[name][-1]} s", flush=True)
    best = {name: min(t) for name, t in times.items()}
    print(f"before_s={times['before']} after_s={times['after']} best_before_s={best['before']} "
          f"best_after_s={best['after']} ratio={best['before'] / best['after']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
