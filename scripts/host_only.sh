#!/usr/bin/env bash
# The host-only build (GPU_BASICS_HOST_ONLY=ON, preset host-only): show, report, compare, replay
# and check --from without the CUDA toolkit. Installs what is missing, configures, builds and runs
# its tests (build/host-only).
#   --hide-cuda  (CI) build and test where CUDA is hidden: a private mount namespace with an empty
#                directory over each /usr/local/cuda-*, and nothing named cuda on PATH, so the
#                build shows that it needs none (needs root, as CI has).
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ "${1:-}" == "--hide-cuda" && -z "${GPU_BASICS_CUDA_HIDDEN:-}" ]]; then
  bash scripts/install_deps.sh --tests --no-cuda
  exec unshare --mount env GPU_BASICS_CUDA_HIDDEN=1 bash -c '
    for d in /usr/local/cuda-*; do
      if [[ -d "$d" && ! -L "$d" ]]; then mount -t tmpfs -o size=1m,ro none "$d"; fi
    done
    exec bash "$0" --hide-cuda' "$0"
fi
if [[ -n "${GPU_BASICS_CUDA_HIDDEN:-}" ]]; then
  PATH=$(tr : '\n' <<<"$PATH" | grep -v -i cuda | paste -sd:)
  export PATH
  if nvcc --version >/dev/null 2>&1; then
    echo "host_only.sh: nvcc still runs: CUDA is not hidden" >&2
    exit 1
  fi
  echo "host_only.sh: CUDA hidden (no nvcc, /usr/local/cuda-* empty)"
else
  bash scripts/install_deps.sh --tests --no-cuda
fi
cmake --preset host-only >/dev/null
cmake --build --preset host-only --parallel "$(nproc 2>/dev/null || echo 2)"
ctest --preset host-only
