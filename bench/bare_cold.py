"""The bare Spark job of bench_ingest.py (Kafka -> from_json -> Delta append) as a fresh
process, for bench_cold.py: the same Spark start (floeline's session settings and jars)
and the same batch size as the connector, nothing of floeline's around it. Its cold
figures are what Spark itself costs on this machine, the floor under floeline's.

    python bench/bare_cold.py BOOTSTRAP TOPIC OUT_DIR MAX_PER_TRIGGER
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
sys.path.insert(0, os.path.dirname(__file__))

from bench_ingest import bare_job  # noqa: E402

from floeline.spark import get_spark  # noqa: E402


def main() -> int:
    bootstrap, topic, out_dir, max_per_trigger = sys.argv[1:5]
    bare_job(get_spark(), bootstrap, topic, out_dir, int(max_per_trigger))
    return 0


if __name__ == "__main__":
    sys.exit(main())
