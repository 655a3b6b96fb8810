#!/usr/bin/env bash
# Records the unified lesson on a GPU machine (the H200): builds the default preset, runs the
# lesson's GPU tests (and memcheck over them), writes tests/data/h200_unified.json from a run with
# the default configuration, and times `all` with its report. Logs go to the directory given
# (default: results/record_unified), packed into one archive beside them.
#
#   scripts/record_unified.sh [LOG_DIR]
#
# Then, on any machine: the CPU tests read the new fixture (build/<preset>/tests/
# gpu_basics_unit_tests --gtest_filter='Unified*'), and `gpu-basics report` draws it.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
logs="${1:-results/record_unified}"
mkdir -p "$logs"
if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
source scripts/record_step.sh
step build bash -c "cmake --preset default && cmake --build build/default -j$(nproc)" || exit 1
step gpu_tests ctest --test-dir build/default -L gpu -R 'UnifiedGpu|Lessons\.' --output-on-failure
step memcheck compute-sanitizer --tool memcheck build/default/tests/gpu_basics_gpu_tests \
  --gtest_filter='UnifiedGpu.*'
step unified bash -c "build/default/gpu-basics unified --json tests/data/h200_unified.json \
  --html $logs/unified.html"
cp tests/data/h200_unified.json "$logs/" 2>/dev/null
step all bash -c "time build/default/gpu-basics all --json $logs/all.json --html $logs/all.html"
step cpu_tests build/default/tests/gpu_basics_unit_tests --gtest_filter='Unified*'
tar -czf "$logs.tar.gz" -C "$(dirname "$logs")" "$(basename "$logs")"
echo "logs: $logs.tar.gz"
exit $status
