#!/usr/bin/env bash
# Runs clang-tidy (.clang-tidy's checks) over the host C++ sources of the library and the CLI,
# using a configured build's compile_commands.json (default build/default). CUDA sources are left
# out: clang-tidy does not parse nvcc's dialect.
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build/default}"
if [[ ! -f "$build/compile_commands.json" ]]; then
  echo "tidy: $build/compile_commands.json not found: configure first (cmake --preset default)" >&2
  exit 1
fi
mapfile -t files < <(git ls-files -- 'src/*.cpp' 'apps/*.cpp')
jobs=$(nproc 2>/dev/null || echo 2)
# The compile commands carry GCC-only warning flags (-Wno-restrict, -Wno-error=maybe-uninitialized)
# that clang rejects as errors under -Werror.
printf '%s\n' "${files[@]}" |
  xargs -P "$jobs" -n 4 clang-tidy -p "$build" --quiet --extra-arg=-Wno-unknown-warning-option
echo "tidy: ${#files[@]} files clean"
