#!/usr/bin/env bash
# Records what the ceilings work is judged by, on a GPU machine (the H200), in phases that each
# fit one call of at most 10 minutes there (times from an H100 host with 16 cores):
#
#   lessons  builds the default preset if needed (about 2 min), then the transfer lesson's staged
#            copies and their variants (about 100 s), the profile lesson's sampler cost (10 s),
#            the allocator's single-thread pair against glibc and its batches freed by another
#            thread, and the GPU suite without the PyTorch tests (about 100 s);
#   torch    the PyTorch tests of the GPU suite (about 6 min), keeping torch.advise's snapshots;
#   advise   torch.advise alone (about 2 min; up to 5 more with its reruns), its snapshots kept;
#   step     the training loop's step time, PyTorch's allocator against ours, 7 interleaved
#            repetitions; with BEFORE_LIB=PATH also a library built from an earlier commit.
#
# Name PyTorch's Python before the first phase (its build finds PyTorch from it): export
# GPU_BASICS_TORCH_PYTHON=PATH, or put it first on PATH as python3. Logs go to the directory
# given (default: results/record_ceilings), packed into one archive.
#
#   scripts/record_ceilings.sh [lessons|torch|advise|step|all] [LOG_DIR]
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
phase="${1:-lessons}"
logs="${2:-results/record_ceilings}"
case "$phase" in
  lessons | torch | advise | step | all) ;;
  *)
    echo "record_ceilings.sh: unknown phase '$phase' (lessons, torch, advise, step or all)" >&2
    exit 2
    ;;
esac
mkdir -p "$logs"
if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
source scripts/record_step.sh
pack() {
  tar -czf "$logs.tar.gz" -C "$(dirname "$logs")" "$(basename "$logs")"
  echo "logs: $logs.tar.gz"
}
# PyTorch's Python: GPU_BASICS_TORCH_PYTHON, else python3 where it imports torch (cmake/torch.cmake
# assumes none).
if [[ -z ${GPU_BASICS_TORCH_PYTHON:-} ]] && python3 -c "import torch" >/dev/null 2>&1; then
  GPU_BASICS_TORCH_PYTHON="$(command -v python3)"
fi
torch_python=()
if [[ -n ${GPU_BASICS_TORCH_PYTHON:-} ]]; then
  torch_python=("-DGPU_BASICS_TORCH_PYTHON=$GPU_BASICS_TORCH_PYTHON")
fi
if [[ ! -x build/default/gpu-basics ]]; then
  build_cmd='cmake --preset default "$@" && cmake --build build/default -j"$(nproc)"'
  if ! step build bash -c "$build_cmd" configure "${torch_python[@]}"; then
    pack
    exit 1
  fi
fi
if [[ $phase == lessons || $phase == all ]]; then
  step transfer build/default/gpu-basics transfer --json "$logs/transfer.json"
  step profile build/default/gpu-basics profile --json "$logs/profile.json"
  step allocator build/default/bench/gpu_basics_bench_allocator \
    --benchmark_filter='Pair_Fake/512$|GlibcMallocFree/512$|Fake_Threads|OneStream|Batch' \
    --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
  step gpu_tests ctest --test-dir build/default -L gpu -E '^torch\.' --output-on-failure
fi
if [[ $phase == torch || $phase == advise || $phase == all ]]; then
  tests='^torch\.'
  [[ $phase == advise ]] && tests='^torch\.advise$'
  step torch_tests ctest --test-dir build/default -L gpu -R "$tests" --output-on-failure
  # torch.advise's checks as JSON, its snapshots and, where PyTorch disagreed, its reruns'.
  rm -rf "$logs/advise_work"
  [[ -d build/default/tests/advise_work ]] && cp -r build/default/tests/advise_work "$logs/"
  # Without PyTorch's Python on PATH at configure time every torch test skips, and ctest passes.
  if grep -q 'Skipped' "$logs/torch_tests.log"; then
    echo "   torch tests skipped: configure with PyTorch's Python first on PATH"
    status=1
  fi
fi
if [[ $phase == step || $phase == all ]]; then
  also=()
  [[ -n ${BEFORE_LIB:-} ]] && also=(--also-lib "before=$BEFORE_LIB")
  step torch_step_time python3 bench/torch_step_time.py --reps 7 --only pytorch --only ours \
    "${also[@]}" --work "$logs/step_work" --json "$logs/torch_step_time.json"
fi
pack
exit "$status"
