"""Time to the first committed row as a user meets it (issue 12 item 7): a fresh
`floeline run CONFIG --until-caught-up` process on a new topic holding 5 records (the
demo's size), on a warm set-up (jars fetched, broker up), timed from launch, with the
wait split into its parts by the connector's own first-commit line (floeline/startup.py):
before Spark, Spark start (and whether Ivy resolved the jars), connector set-up, source
planning, first batch (and table creation inside it).

Same run baselines: `python -c "import pyspark; SparkSession...getOrCreate()"` with
floeline's Spark settings, i.e. a bare Spark start with the same jars; it shows how much
of the wait is Spark's own start on this machine. And each of the two again with
FLOELINE_CLASS_ARCHIVE=off (class_archive.py: the JVM without set-up's class archive),
alternating, so the archive's saving is a ratio of the same run.

    .venv/bin/python bench/bench_startup.py [--runs 3] [--baseline-src DIR]

--baseline-src DIR: instead of the class archive's on/off, alternate with floeline's
source at DIR (say `git worktree add /tmp/base <commit>`, then /tmp/base/src), both
with their archive: a change's saving as a ratio of the same run
(first_row_s=N baseline_first_row_s=N spark_only_s=N baseline_spark_only_s=N ratio=R).

Last line: first_row_s=N spark_only_s=N first_row_no_archive_s=N spark_only_no_archive_s=N
archive_ratio=R (first_row_s / first_row_no_archive_s) parts: <the median run's first-commit line>.
Goal: first_row_s <= 10 on a quiet machine."""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from floeline.dev import kafka as devkafka  # noqa: E402
from floeline.sources.kafka import produce  # noqa: E402

_FIRST = re.compile(r"first commit ([0-9.]+) s after launch: (.*)")
_SPARK_ONLY = """
import time
from floeline import spark
spark.get_spark().range(1).count()
print(f"spark ready", flush=True)
"""


SRC = os.path.join(os.path.dirname(__file__), "..", "src")


def _env(archive: bool, src: str = SRC) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": src, **({} if archive else {"FLOELINE_CLASS_ARCHIVE": "off"})}


def one_run(bootstrap: str, work: str, i: int, archive: bool = True, src: str = SRC) -> tuple[float, str]:
    topic = f"startup_{int(time.time())}_{i}"
    devkafka.create_topic(bootstrap, topic, partitions=2)
    produce(bootstrap, topic, [{"value": {"order_id": n, "customer": "x", "total": 1.5}} for n in range(5)])
    config = os.path.join(work, f"startup{i}.properties")
    with open(config, "w") as f:
        f.write(f"name=startup{i}\ntopics={topic}\nbootstrap.servers={bootstrap}\n"
                f"floeline.warehouse={os.path.join(work, 'warehouse')}\nbuffer.flush.time=1\n")
    done = subprocess.run([sys.executable, "-m", "floeline.cli", "run", config, "--until-caught-up"],
                          capture_output=True, text=True, timeout=900, env=_env(archive, src), cwd=src)
    found = _FIRST.search(done.stdout)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"floeline run failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    print(found.group(0), flush=True)
    return float(found.group(1)), found.group(2)


def spark_only(archive: bool = True, src: str = SRC) -> float:
    started = time.time()
    subprocess.run([sys.executable, "-c", _SPARK_ONLY], check=True, capture_output=True, timeout=900,
                   env=_env(archive, src), cwd=src)
    return time.time() - started


def alternate(bootstrap: str, work: str, runs: int, other: dict) -> tuple[list, list, list, list]:
    """`runs` rounds of four fresh processes: floeline run and a bare Spark start as
    they are, then each with `other` (one_run's and spark_only's keyword arguments: the
    baseline); returns (first rows, bare starts, the baseline's first rows, its bare starts)."""
    firsts, bares, other_firsts, other_bares = [], [], [], []
    for i in range(runs):
        firsts.append(one_run(bootstrap, work, i))
        bares.append(spark_only())
        other_firsts.append(one_run(bootstrap, work, 100 + i, **other)[0])
        other_bares.append(spark_only(**other))
        print(f"spark only: {bares[-1]:.1f} s; baseline: floeline {other_firsts[-1]:.1f} s, "
              f"spark only {other_bares[-1]:.1f} s", flush=True)
    return firsts, bares, other_firsts, other_bares


def keep_both_archives(baseline: str) -> None:
    """Make this source's class archive and the baseline's (each named by its class path).
    Making one removes the others, so this source's is put back after the baseline's."""
    import shutil

    from floeline.cache import cache_dir
    from floeline.cli import report_class_archive

    report_class_archive()
    folder = cache_dir() / "jvm-class-archive"
    aside = Path(tempfile.mkdtemp(prefix="floeline-archives-"))
    for path in folder.glob("spark-*.jsa"):
        shutil.copy2(path, aside / path.name)
    subprocess.run([sys.executable, "-c", "from floeline.cli import report_class_archive; report_class_archive()"],
                   check=True, env=_env(True, baseline), cwd=baseline)
    for path in aside.glob("spark-*.jsa"):
        if not (folder / path.name).exists():
            shutil.move(path, folder / path.name)
    shutil.rmtree(aside)
    print(f"class archives: {sorted(p.name for p in folder.glob('spark-*.jsa'))}")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--baseline-src", help="floeline's src folder of the baseline to alternate with")
    args = parser.parse_args()
    bootstrap = devkafka.start()
    work = tempfile.mkdtemp(prefix="floeline-startup-")
    one_run(bootstrap, work, -1)  # warm-up: the page cache, Ivy's record of the jars
    if args.baseline_src:
        baseline = os.path.abspath(args.baseline_src)
        keep_both_archives(baseline)
        one_run(bootstrap, work, -2, src=baseline)  # the baseline's warm-up
        firsts, bares, base_firsts, base_bares = alternate(bootstrap, work, args.runs, {"src": baseline})
        median, base = sorted(firsts)[len(firsts) // 2], statistics.median(base_firsts)
        print(f"first_row_s={median[0]:.1f} baseline_first_row_s={base:.1f} "
              f"spark_only_s={statistics.median(bares):.1f} baseline_spark_only_s={statistics.median(base_bares):.1f} "
              f"ratio={median[0] / base:.2f} load={os.getloadavg()[0]:.1f} parts: {median[1]}")
        return 0
    firsts, bares, plain_firsts, plain_bares = alternate(bootstrap, work, args.runs, {"archive": False})
    median, plain = sorted(firsts)[len(firsts) // 2], statistics.median(plain_firsts)
    print(f"first_row_s={median[0]:.1f} spark_only_s={statistics.median(bares):.1f} "
          f"first_row_no_archive_s={plain:.1f} spark_only_no_archive_s={statistics.median(plain_bares):.1f} "
          f"archive_ratio={median[0] / plain:.2f} load={os.getloadavg()[0]:.1f} parts: {median[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
