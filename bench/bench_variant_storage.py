"""Write cost of a table's forms, i.e. of the default storage choice (docs/sql.md, other
engines): the same records written by the connector with semi-structured columns as
Delta VARIANT (floeline.variant.storage=variant), as JSON text (the default since
issue 55, the form every engine reads) and with a structured RECORD_METADATA
(snowflake.feature.structured.record.metadata.enabled=true), in one run and one Spark
session (alternating rounds after a warm-up of each; best round each). `--forms` picks
some of them (variant, the baseline, always). `iceberg` is a table Iceberg readers open
(snowflake.autocreate.table.type=iceberg: JSON text, the structured RECORD_METADATA and
the Iceberg metadata floeline writes after each batch, warehouse/iceberg_mirror.py);
compare it with `json` for the mirror's own cost, with `--batch-records` for batches
of that many records (default: one batch a round).

The source is the memory source (tests' broker-less source; its Python reader costs
every form the same), so the figures compare the forms, not Kafka throughput.
Each record has RECORD_METADATA, a nested object (a VARIANT column) and three scalars.
Last line: `variant_rows_per_s=N json_rows_per_s=N ... json_vs_variant=R ...`."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from floeline.config import config_from_dict  # noqa: E402
from floeline.ingest import Connector  # noqa: E402
from floeline.sources.memory import MemoryLog, MemorySource  # noqa: E402
from floeline.spark import get_spark  # noqa: E402


def record(n: int) -> bytes:
    return json.dumps({"order_id": n, "customer_name": f"customer {n % 977}", "total": n * 0.25,
                       "details": {"items": [{"sku": f"s{n % 13}", "qty": n % 5 + 1}],
                                   "address": {"city": "Lisbon", "zip": f"{n % 9999:04d}"},
                                   "gift": n % 2 == 0}}).encode()


def fill(log: MemoryLog, records: int, channels: int) -> None:
    per = records // channels
    for c in range(channels):
        log.append(f"orders/{c}", "orders", [record(c * per + i) for i in range(per)])


FORMS = {
    "variant": {"floeline.variant.storage": "variant"},
    "json": {},  # the default
    "structured": {"snowflake.feature.structured.record.metadata.enabled": "true",
                   "floeline.variant.storage": "variant"},
    "iceberg": {"snowflake.autocreate.table.type": "iceberg"},
}


def run(spark, log: MemoryLog, form: str, records: int, work: str, name: str, batch: int | None = None) -> float:
    config = config_from_dict({
        "name": name, "topics": "orders", "floeline.warehouse": os.path.join(work, name),
        **FORMS[form], "buffer.count.records": str(batch or records),
        "buffer.flush.time": "1"})
    started = time.time()
    Connector(config, spark, source=MemorySource(config, log)).run(until_caught_up=True)
    elapsed = time.time() - started
    written = spark.read.format("delta").load(
        os.path.join(work, name, "FLOELINE", "PUBLIC", "ORDERS")).count()
    assert written == records, (written, records)
    return records / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--channels", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--forms", default="variant,json,structured", help=f"some of {', '.join(FORMS)}")
    parser.add_argument("--batch-records", type=int, default=None,
                        help="records per batch (buffer.count.records; default: a round in one batch)")
    args = parser.parse_args()
    forms = [f for f in args.forms.split(",") if f]
    unknown = sorted(set(forms) - set(FORMS))
    if unknown or "variant" not in forms:
        parser.error(f"--forms: {', '.join(unknown) or 'variant (the baseline) is missing'}")
    spark = get_spark()
    with tempfile.TemporaryDirectory(prefix="floeline-bench-variant-") as work:
        log = MemoryLog(os.path.join(work, "log"))
        fill(log, args.records, args.channels)
        records = args.records // args.channels * args.channels
        small = MemoryLog(os.path.join(work, "warmup-log"))
        fill(small, 2000, args.channels)
        for form in forms:
            run(spark, small, form, 2000, work, f"warmup_{form}")
        best = dict.fromkeys(forms, 0.0)
        for i in range(args.rounds):
            for form in forms:
                rate = run(spark, log, form, records, work, f"{form}_{i}", args.batch_records)
                print(f"round {i + 1}: {form}: {rate:,.0f} rows/s", flush=True)
                best[form] = max(best[form], rate)
    print(f"records={records} channels={args.channels} batch_records={args.batch_records or records} "
          f"(best of {args.rounds} rounds)")
    print(" ".join([f"{form}_rows_per_s={best[form]:.0f}" for form in forms]
                   + [f"{form}_vs_variant={best[form] / best['variant']:.2f}" for form in forms if form != "variant"]))


if __name__ == "__main__":
    main()
