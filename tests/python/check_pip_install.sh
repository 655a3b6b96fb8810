#!/usr/bin/env bash
# The README's install line for the Python package, in a fresh virtual environment that sees the
# system's packages (setuptools, pytest) and nothing else: no index is reachable, none is asked.
#   check_pip_install.sh PYTHON SOURCE_DIR BUILD_DIR WORK_DIR
set -euo pipefail
py="$1" src="$2" build="$3" work="$4"
rm -rf "$work"
mkdir -p "$work"
# pip builds in place: keep the source tree clean. The copy keeps the repository's layout, where
# setup.py finds the VERSION file.
mkdir -p "$work/src"
cp -r "$src/python" "$work/src/python"
cp "$src/VERSION" "$work/src/VERSION"
"$py" -m venv --system-site-packages "$work/venv"
GPU_BASICS_BUILD_DIR="$build" "$work/venv/bin/python" -m pip install --no-build-isolation --no-index \
  --disable-pip-version-check -q "$work/src/python"
rm -rf "$work/src"   # the installed copy must not read the repository's VERSION
cd "$work"   # away from the source tree: the installed copy must work on its own
env -u GPU_BASICS_TORCH_ALLOC_LIB GPU_BASICS_VERSION="$(cat "$src/VERSION")" \
  "$work/venv/bin/python" - <<'PY'
import importlib.metadata
import os
import gpu_basics
want = os.environ["GPU_BASICS_VERSION"].strip()
assert gpu_basics.__version__ == want, (gpu_basics.__version__, want)
assert importlib.metadata.version("gpu_basics") == want, importlib.metadata.version("gpu_basics")
info = gpu_basics.build_info()
assert "/venv/" in info["path"] and "/_lib/" in info["path"], info["path"]
assert gpu_basics.check_conf("expandable_segments:True") == "expandable_segments:True"
try:
    gpu_basics.check_conf("expandable_segments:Maybe")
    raise SystemExit("a bad conf was accepted")
except ValueError as e:
    print("bad conf refused:", e)
print("installed:", gpu_basics.__version__, info["path"], "oom:", info["oom_exception"])
PY
