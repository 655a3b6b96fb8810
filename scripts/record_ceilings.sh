#!/usr/bin/env bash
# Records what the ceilings work is judged by, on a GPU machine (the H200), after
# scripts/record_unified.sh (or scripts/build.sh) has built the default preset: the transfer
# lesson's staged copies and their variants, the profile lesson's sampler cost, the allocator's
# single-thread pair against glibc and its batches freed by another thread, and the GPU suite.
# Logs go to the directory given (default: results/record_ceilings), packed into one archive.
#
#   scripts/record_ceilings.sh [LOG_DIR]
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
logs="${1:-results/record_ceilings}"
mkdir -p "$logs"
source scripts/record_step.sh
[[ -x build/default/gpu-basics ]] || { echo "build the default preset first"; exit 1; }
step transfer build/default/gpu-basics transfer --json "$logs/transfer.json"
step profile build/default/gpu-basics profile --json "$logs/profile.json"
step allocator build/default/bench/gpu_basics_bench_allocator \
  --benchmark_filter='Pair_Fake/512$|GlibcMallocFree/512$|Fake_Threads|OneStream|Batch' \
  --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
step gpu_tests ctest --test-dir build/default -L gpu --output-on-failure
tar -czf "$logs.tar.gz" -C "$(dirname "$logs")" "$(basename "$logs")"
echo "logs: $logs.tar.gz"
exit $status
