#!/usr/bin/env bash
# Installs the build dependencies of gpu-basics that are missing, from the distribution's
# packages (Debian/Ubuntu). Does nothing when everything is already there, so it also runs on
# machines without a package registry. The CUDA toolkit (nvcc, cudart, cuBLAS, CUPTI) is not
# installed here: it must already be present (default /usr/local/cuda).
set -euo pipefail

# header (relative to an include dir) -> Debian package
declare -A wanted=(
  [yaml-cpp/yaml.h]=libyaml-cpp-dev
  [spdlog/spdlog.h]=libspdlog-dev
  [fmt/format.h]=libfmt-dev
  [CLI/CLI.hpp]=libcli11-dev
  [nlohmann/json.hpp]=nlohmann-json3-dev
  [gtest/gtest.h]=libgtest-dev
  [gmock/gmock.h]=libgmock-dev
  [benchmark/benchmark.h]=libbenchmark-dev
)
include_dirs=(/usr/include /usr/local/include)

missing=()
for header in "${!wanted[@]}"; do
  found=0
  for dir in "${include_dirs[@]}"; do
    [[ -f "$dir/$header" ]] && { found=1; break; }
  done
  (( found )) || missing+=("${wanted[$header]}")
done
command -v cmake >/dev/null || missing+=(cmake)
# Optional (gzip-compressed traces): added only when apt-get runs anyway, so a machine without a
# package registry that has everything required still builds, without gzip.
optional=()
found=0
for dir in "${include_dirs[@]}"; do [[ -f "$dir/zlib.h" ]] && found=1; done
(( found )) || optional+=(zlib1g-dev)
command -v g++ >/dev/null || missing+=(g++)
# clang-format keeps the tree's format (the format.check test). Optional like zlib, except in CI,
# where the check must run.
if ! command -v clang-format >/dev/null; then
  if [[ "${CI:-}" == "true" ]]; then missing+=(clang-format); else optional+=(clang-format); fi
fi

# The browser test of the HTML report (ctest -L browser) drives headless Chromium from Python;
# the Slurm test runs Slurm's daemons. Wanted when tests are built (scripts/build.sh says so with
# --tests); required in CI, optional elsewhere (the tests skip without them).
if [[ "${1:-}" == "--tests" ]]; then
  for_tests=()
  command -v python3 >/dev/null || for_tests+=(python3)
  command -v chromium >/dev/null || command -v chromium-browser >/dev/null || for_tests+=(chromium)
  [[ -d /usr/share/fonts/truetype/dejavu ]] || for_tests+=(fonts-dejavu-core)  # text in screenshots
  # The Python package's tests (pytest) and its pip install in a fresh venv (ctest -R python):
  # Debian's Python tooling, since no package index is reachable.
  for mod in pytest:python3-pytest setuptools:python3-setuptools wheel:python3-wheel \
             venv:python3-venv ensurepip:python3-venv pip:python3-pip; do
    if ! /usr/bin/python3 -c "import ${mod%%:*}" >/dev/null 2>&1; then
      [[ " ${for_tests[*]} " == *" ${mod##*:} "* ]] || for_tests+=("${mod##*:}")
    fi
  done
  # The fleet recipe on a real Slurm (ctest -L slurm): a one-node cluster the test starts on
  # localhost, with its own munge key. The daemons live in /usr/sbin.
  for tool in srun:slurm-wlm slurmctld:slurm-wlm slurmd:slurm-wlm munged:munge; do
    if ! PATH="$PATH:/usr/sbin:/sbin" command -v "${tool%%:*}" >/dev/null; then
      [[ " ${for_tests[*]} " == *" ${tool##*:} "* ]] || for_tests+=("${tool##*:}")
    fi
  done
  if (( ${#for_tests[@]} )); then
    if [[ "${CI:-}" == "true" ]]; then missing+=("${for_tests[@]}"); else optional+=("${for_tests[@]}"); fi
  fi
fi

# clang (with its sanitizer and libFuzzer runtimes) builds the fuzzers (scripts/fuzz.sh).
# Optional like clang-format, except in CI, where the fuzzers run.
if ! command -v clang++ >/dev/null; then
  if [[ "${CI:-}" == "true" ]]; then missing+=(clang libclang-rt-dev); else optional+=(clang libclang-rt-dev); fi
fi

if (( ${#missing[@]} == 0 )); then
  echo "install_deps: all build dependencies present"
else
  echo "install_deps: installing ${missing[*]}"
  if ! command -v apt-get >/dev/null; then
    echo "install_deps: apt-get not found; install these packages by hand: ${missing[*]}" >&2
    exit 1
  fi
  sudo=""
  if (( EUID != 0 )); then sudo="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" "${optional[@]}"
fi

# nvcc is found by CMake on PATH or at /usr/local/cuda/bin (not needed by the host-only build:
# --no-cuda).
if [[ " $* " != *" --no-cuda "* ]] && ! command -v nvcc >/dev/null && [[ ! -x /usr/local/cuda/bin/nvcc ]]; then
  echo "install_deps: nvcc not found: install the CUDA toolkit (12.4 or newer)" >&2
  exit 1
fi
