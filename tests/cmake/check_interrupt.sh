#!/usr/bin/env bash
# Ctrl-C (SIGINT) and SIGTERM stop gpu-basics cleanly: exit 130 / 143, one line "interrupted",
# and nothing left behind. `show` is the command that can block without a GPU: writing its JSON
# into a FIFO that no one reads waits in open() until the signal arrives.
# Usage: check_interrupt.sh <gpu-basics> <results.json> <scratch dir>
set -euo pipefail
exe=$1 results=$2 dir=$3
rm -rf "$dir"
mkdir -p "$dir"
mkfifo "$dir/fifo"
set -m  # job control: the background job gets SIGINT like a foreground one would

check() {
  local signal=$1 expected=$2
  "$exe" show "$results" --json "$dir/fifo" >"$dir/stdout" 2>"$dir/stderr" &
  local pid=$!
  # Once the tables are printed it waits for a reader of the FIFO (start-up alone can take 0.5 s
  # on a loaded machine, so wait for the tables rather than a fixed time).
  for _ in $(seq 100); do
    [[ -s "$dir/stdout" ]] && break
    sleep 0.1
  done
  sleep 0.2
  kill -s "$signal" "$pid"
  local rc=0
  wait "$pid" || rc=$?
  local err
  err=$(cat "$dir/stderr")
  if [[ $rc -ne $expected || "$err" != "gpu-basics: interrupted (SIG$signal)" ]]; then
    echo "SIG$signal: exit $rc (expected $expected), stderr: $err" >&2
    exit 1
  fi
  rm "$dir/stderr" "$dir/stdout"
}
check INT 130
check TERM 143
[[ -p "$dir/fifo" ]] || { echo "the FIFO was replaced" >&2; exit 1; }
left=$(find "$dir" -mindepth 1 ! -name fifo)
[[ -z "$left" ]] || { echo "left behind: $left" >&2; exit 1; }
echo "SIGINT -> 130, SIGTERM -> 143, nothing left behind"
