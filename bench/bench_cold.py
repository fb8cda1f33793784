"""floeline as a user runs it (issue 14): a fresh `floeline run CONFIG --until-caught-up`
process, timed from launch, against a plain Python writer (bench/peer_writer.py:
confluent-kafka + pyarrow's JSON reader + deltalake) on the same topic in the same run,
and against bench_ingest.py's bare Spark job as a fresh process (bench/bare_cold.py: the
same Spark start and batch size, no floeline), the floor Spark itself sets.

    .venv/bin/pip install -r bench/requirements.txt   (the peer's deltalake)
    .venv/bin/python bench/bench_cold.py [--records 1000000]

For each process tree (the JVM and Python workers included): wall time from launch
to exit, time from launch to the first committed row (the first Delta commit with an
add action, watched in the table's _delta_log), CPU-seconds (getrusage of the reaped
tree: this process is made a child subreaper so the JVM and workers are reaped here
too), peak RSS (the tree's resident memory summed, sampled every 0.2 s), and the
steady-state CPU per row after the first commit (the tree's CPU sampled at the first
commit; rows of the first commit from its add actions' stats).

Last line: cold_s=N peer_cold_s=N cold_ratio=R cpu_per_row_us=N peer_cpu_per_row_us=N
first_row_s=N peer_first_row_s=N rss_mb=N peer_rss_mb=N bare_cold_s=N
bare_cpu_per_row_us=N bare_first_row_s=N bare_rss_mb=N
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import json
import os
import platform
import random
import resource
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
sys.path.insert(0, os.path.dirname(__file__))

from bench_ingest import PARTITIONS, produce_records  # noqa: E402

from floeline.dev import kafka as devkafka  # noqa: E402

_TICK = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


def _tree(root: int) -> list[int]:
    """`root` and its descendants, from /proc."""
    children: dict[int, list[int]] = {}
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(stat) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.split("/")[2]))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


_KCMP_SYSCALL = {"x86_64": 312, "aarch64": 272}.get(platform.machine())
_KCMP_VM = 1
_libc = ctypes.CDLL(None, use_errno=True)


def kcmp_works() -> bool:
    """Whether this process may call kcmp (a container's seccomp profile may refuse it;
    own_address_spaces then counts every process)."""
    return _KCMP_SYSCALL is not None and _libc.syscall(_KCMP_SYSCALL, os.getpid(), os.getpid(), _KCMP_VM, 0, 0) == 0


def own_address_spaces(pids: list[int]) -> list[int]:
    """`pids` without those that share an earlier one's memory. The JVM starts a
    process (a Python worker, a shell command) with posix_spawn, whose child runs in
    the JVM's own address space (clone with CLONE_VM) until it execs: a sample taken in
    that instant counted the JVM twice (RSS and PSS alike), and a peak picks exactly such
    samples. Linux's kcmp(KCMP_VM) says whether two processes share one."""
    if _KCMP_SYSCALL is None:
        return list(pids)
    kept: list[int] = []
    for pid in pids:
        if not any(_libc.syscall(_KCMP_SYSCALL, pid, other, _KCMP_VM, 0, 0) == 0 for other in kept):
            kept.append(pid)
    return kept


def _cpu_and_rss(pids: list[int]) -> tuple[float, int]:
    cpu, rss = 0.0, 0
    counted = set(own_address_spaces(pids))
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if pid in counted:
                with open(f"/proc/{pid}/statm") as f:
                    rss += int(f.read().split()[1]) * _PAGE
        except OSError:
            continue
        cpu += (int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])) / _TICK
    return cpu, rss


def _first_add(log_dir: str) -> tuple[int, int] | None:
    """(version, rows) of the first commit in `log_dir` that adds data files."""
    for path in sorted(glob.glob(os.path.join(log_dir, "*.json"))):
        rows, adds = 0, False
        with open(path) as f:
            for line in f:
                action = json.loads(line)
                if "add" in action:
                    adds = True
                    stats = action["add"].get("stats")
                    rows += json.loads(stats).get("numRecords", 0) if stats else 0
        if adds:
            return int(os.path.basename(path).split(".")[0]), rows
    return None


def timed_tree(command: list[str], log_dir_of, env=None) -> dict:
    """Run `command` to its end; its figures (see the module docstring)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    launched = time.time()
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output: list[str] = []
    reader = threading.Thread(target=lambda: output.extend(proc.stdout), daemon=True)
    reader.start()
    peak_rss, first, seen = 0, None, set()
    while proc.poll() is None:
        tree = _tree(proc.pid)
        seen.update(tree)
        cpu, rss = _cpu_and_rss(tree)
        peak_rss = max(peak_rss, rss)
        if first is None:
            log_dir = log_dir_of()
            found = _first_add(log_dir) if log_dir and os.path.isdir(log_dir) else None
            if found is not None:
                first = {"s": time.time() - launched, "cpu": cpu, "rows": found[1]}
        time.sleep(0.2)
    wall = time.time() - launched
    # Reap what the tree left behind (reparented to this subreaper), so its CPU counts.
    for pid in seen - {proc.pid}:
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:  # not ours (reaped by its parent)
            pass
    reader.join(5)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode != 0:
        raise SystemExit(f"{command} failed ({proc.returncode}):\n{''.join(output[-40:])}")
    return {"wall_s": wall, "cpu_s": cpu, "rss": peak_rss, "first": first, "output": output}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--count-records", type=int, default=100_000)
    args = parser.parse_args()
    bootstrap = devkafka.start()
    ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER (after the broker's start)
    topic = f"cold_{int(time.time())}_{random.randint(0, 999)}"
    devkafka.create_topic(bootstrap, topic, partitions=PARTITIONS)
    produced_s = produce_records(bootstrap, topic, args.records)
    print(f"produced {args.records} records to {topic} ({PARTITIONS} partitions) in {produced_s:.1f} s",
          flush=True)
    work = tempfile.mkdtemp(prefix="floeline-cold-")
    load = os.getloadavg()[0]

    peer_dir = os.path.join(work, "peer_table")
    peer = timed_tree([sys.executable, os.path.join(os.path.dirname(__file__), "peer_writer.py"),
                       bootstrap, topic, peer_dir, "--batch", str(args.count_records)],
                      lambda: os.path.join(peer_dir, "_delta_log"))

    warehouse = os.path.join(work, "warehouse")
    config = os.path.join(work, "cold.properties")
    with open(config, "w") as f:
        f.write(f"name=cold\ntopics={topic}\nbootstrap.servers={bootstrap}\nfloeline.warehouse={warehouse}\n"
                f"buffer.count.records={args.count_records}\nbuffer.flush.time=1\n")
    table_log = os.path.join(warehouse, "FLOELINE", "PUBLIC", topic.upper(), "_delta_log")
    floe = timed_tree([sys.executable, "-m", "floeline.cli", "run", config, "--until-caught-up"],
                      lambda: table_log)

    bare_dir = os.path.join(work, "bare")
    bare = timed_tree([sys.executable, os.path.join(os.path.dirname(__file__), "bare_cold.py"),
                       bootstrap, topic, bare_dir, str(args.count_records * PARTITIONS)],
                      lambda: os.path.join(bare_dir, "bare_table", "_delta_log"))

    from deltalake import DeltaTable  # the peer's library reads every table

    peer_rows = DeltaTable(peer_dir).to_pyarrow_dataset().count_rows()
    floe_rows = DeltaTable(os.path.dirname(table_log)).to_pyarrow_dataset().count_rows()
    bare_rows = DeltaTable(os.path.join(bare_dir, "bare_table")).to_pyarrow_dataset().count_rows()
    assert peer_rows == floe_rows == bare_rows == args.records, (peer_rows, floe_rows, bare_rows)

    def steady_us(run: dict) -> float:
        """CPU per row after the first commit (NaN when that commit held nearly all)."""
        first = run["first"]
        later = args.records - first["rows"]
        return (run["cpu_s"] - first["cpu"]) / later * 1e6 if later >= args.records // 10 else float("nan")

    for name, run in (("peer", peer), ("floeline", floe), ("bare Spark", bare)):
        print(f"{name}: {run['wall_s']:.1f} s from launch, first row committed after "
              f"{run['first']['s']:.1f} s, {run['cpu_s']:.1f} CPU-s "
              f"({run['cpu_s'] / args.records * 1e6:.1f} us/row; after the first commit "
              f"{steady_us(run):.1f} us/row), peak RSS {run['rss'] / 2**20:.0f} MB", flush=True)
    print(f"load average at start: {load:.1f}, at end: {os.getloadavg()[0]:.1f}")
    print(f"cold_s={floe['wall_s']:.1f} peer_cold_s={peer['wall_s']:.1f} "
          f"cold_ratio={floe['wall_s'] / peer['wall_s']:.1f} "
          f"cpu_per_row_us={steady_us(floe):.1f} peer_cpu_per_row_us={steady_us(peer):.1f} "
          f"first_row_s={floe['first']['s']:.1f} peer_first_row_s={peer['first']['s']:.1f} "
          f"rss_mb={floe['rss'] / 2**20:.0f} peer_rss_mb={peer['rss'] / 2**20:.0f} "
          f"bare_cold_s={bare['wall_s']:.1f} bare_cpu_per_row_us={steady_us(bare):.1f} "
          f"bare_first_row_s={bare['first']['s']:.1f} bare_rss_mb={bare['rss'] / 2**20:.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
