#!/usr/bin/env bash
# Before/after in one run: `make bench`'s and `make bench-cold`'s benchmarks from the tree
# at REV (a git worktree made for it) and then from this tree, one after the other, with
# nothing else running. Usage: bench/before_after.sh REV [ingest|cold|both]
set -u
rev=${1:?usage: bench/before_after.sh REV [ingest|cold|both]}
which=${2:-both}
here=$(cd "$(dirname "$0")/.." && pwd)
py=$here/.venv/bin/python
before=$(mktemp -d)/before
git -C "$here" worktree add -q --detach "$before" "$rev" || exit 1
trap 'git -C "$here" worktree remove --force "$before"' EXIT

run() { # label tree script
  echo "=== $1 start $(date -u +%H:%M:%S) load: $(cut -d' ' -f1-3 /proc/loadavg)"
  (cd "$2" && PYTHONPATH="$2/src" "$py" "bench/$3" 2>"/tmp/before_after_$1.err" | tail -25)
  (cd "$2" && PYTHONPATH="$2/src" "$py" -m floeline.cli kafka stop >/dev/null 2>&1)
  echo "=== end $1 $(date -u +%H:%M:%S) load: $(cut -d' ' -f1-3 /proc/loadavg)"
}
if [ "$which" != cold ]; then
  run ingest_before "$before" bench_ingest.py
  run ingest_after "$here" bench_ingest.py
fi
if [ "$which" != ingest ]; then
  "$here/.venv/bin/pip" install -q -r "$here/bench/requirements.txt"
  run cold_before "$before" bench_cold.py
  run cold_after "$here" bench_cold.py
fi
