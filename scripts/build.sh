#!/usr/bin/env bash
# Installs what is missing, configures and builds a preset (default: "default").
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-default}"
# Every preset builds the tests (the browser test among them): bring what they need too.
bash scripts/install_deps.sh --tests
if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
cmake --preset "$preset" >/dev/null
jobs=$(nproc 2>/dev/null || echo 2)
cmake --build --preset "$preset" --parallel "$jobs"
