#!/usr/bin/env bash
# Builds the libFuzzer harnesses (fuzz/CMakeLists.txt: clang, AddressSanitizer, UBSan, no CUDA)
# and runs each for a bounded time over its committed corpus (fuzz/corpus/<harness>), which holds
# the seeds and the regression cases: config (configuration text), results (results files through
# show, report and check --from), snapshot (PyTorch snapshots through replay), fleet (several
# results files through compare A B and compare --fleet), policy (--policy strings through
# replay's checks and a replay of a small trace), advice (saved advice and replay files through
# show and report). A finding (an exception other than the
# harness's expected error, a sanitizer report, a run over 1 s or over 512 MiB) fails the script
# and leaves the input as build/fuzz/crash-* (or timeout-*, oom-*). Without clang it says so and
# succeeds. Before a release, run each for 10 minutes: scripts/fuzz.sh 600.
# Usage: scripts/fuzz.sh [seconds per harness, default 60]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
if ! command -v clang++ >/dev/null; then
  echo "fuzz: clang++ not found, fuzzing skipped (scripts/install_deps.sh installs it in CI)"
  exit 0
fi
build=build/fuzz
cmake -S fuzz -B "$build" -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" --parallel "$(nproc 2>/dev/null || echo 2)"
for harness in config results snapshot fleet policy advice; do
  new="$build/new_inputs/$harness"  # what this run adds; the committed corpus is only read
  mkdir -p "$new"
  log="$build/$harness.log"
  echo "fuzz: $harness for ${seconds} s"
  max_len=8192
  # the seeds are whole (small) results files
  [[ $harness == results || $harness == fleet || $harness == advice ]] && max_len=65536
  if ! "$build/${harness}_fuzzer" -timeout=1 -rss_limit_mb=512 -max_total_time="$seconds" \
      -max_len="$max_len" -print_final_stats=1 -artifact_prefix="$build/" \
      "$new" "fuzz/corpus/$harness" >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    echo "fuzz: $harness found a failure (input saved under $build/)" >&2
    exit 1
  fi
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
  corpus=$(grep -o 'corp: [0-9]*/[0-9a-zA-Z]*' "$log" | tail -n 1)
  echo "fuzz: $harness: $runs inputs, $rate per second, no failure ($corpus)"
done
