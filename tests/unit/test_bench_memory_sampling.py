"""The benchmarks' memory sampling (bench/bench_cold.py): a process tree's RSS and PSS
count each address space once. A JVM's posix_spawn child runs in the JVM's memory
until it execs, and counting it doubled the worker's peak (3.2 GB that was 1.8 GB).
A thread of this process shares its address space the same way, which makes it a
test case that needs no JVM."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import bench_cold  # noqa: E402

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux") or not bench_cold.kcmp_works(),
                                reason="kcmp is Linux's (x86_64, aarch64), and a seccomp profile may refuse it")


def test_a_thread_sharing_the_address_space_is_counted_once():
    started, done = threading.Event(), threading.Event()
    tid: list[int] = []

    def run():
        tid.append(threading.get_native_id())
        started.set()
        done.wait(10)

    thread = threading.Thread(target=run)
    thread.start()
    try:
        started.wait(10)
        assert bench_cold.own_address_spaces([os.getpid(), tid[0]]) == [os.getpid()]
        alone = bench_cold._cpu_and_rss([os.getpid()])[1]
        assert alone > 0
        assert bench_cold._cpu_and_rss([os.getpid(), tid[0]])[1] == pytest.approx(alone, rel=0.05)
    finally:
        done.set()
        thread.join()


def test_separate_processes_are_all_counted():
    assert bench_cold.own_address_spaces([os.getpid(), os.getppid()]) == [os.getpid(), os.getppid()]
