#!/usr/bin/env bash
# The README's install line for the Python package, in a fresh virtual environment that sees the
# system's packages (setuptools, wheel, pytest) and nothing else: no index is reachable, none is
# asked. Then what must fail, in one line and without installing anything: a tree with no built
# library, a failed build of the c10 library for the Python's torch, a stale library left in
# python/build by an earlier install, and a Python whose setuptools lacks `wheel`. And an install
# from a read-only source tree.
#   check_pip_install.sh PYTHON SOURCE_DIR BUILD_DIR WORK_DIR
set -euo pipefail
py="$1" src="$2" build="$3" work="$4"
rm -rf "$work"
mkdir -p "$work/nobuild"
# pip builds in place: keep the source tree clean. The copy keeps the repository's layout, where
# setup.py finds the VERSION file.
mkdir -p "$work/src"
cp -r "$src/python" "$work/src/python"
cp "$src/VERSION" "$work/src/VERSION"
version="$(cat "$src/VERSION")"
venv="$work/venv"
"$py" -m venv --system-site-packages "$venv"

pip_install() {  # BUILD_DIR [PYTHON]: pip install of the source copy; its output in $work/pip.log
  GPU_BASICS_BUILD_DIR="$1" "${2:-$venv/bin/python}" -m pip install --no-build-isolation \
    --no-index --disable-pip-version-check --force-reinstall --no-deps -q "$work/src/python" \
    >"$work/pip.log" 2>&1
}

expect_one_line() {  # WHAT PATTERN: the failed install said PATTERN on one line, no traceback
  if [ "$(grep -c -E "$2" "$work/pip.log")" != 1 ] || grep -q Traceback "$work/pip.log"; then
    echo "FAIL: $1: expected one line matching '$2':"; cat "$work/pip.log"; exit 1
  fi
  echo "$1: refused: $(grep -E "$2" "$work/pip.log" | sed 's/^ *//')"
}

not_installed() {  # WHAT
  if "$venv/bin/python" -m pip show -q gpu_basics >/dev/null 2>&1; then
    echo "FAIL: $1: a package was installed"; exit 1
  fi
}

# 1. A tree without a built library: the install fails, nothing is installed.
if pip_install "$work/nobuild"; then echo "FAIL: installed without a built library"; exit 1; fi
expect_one_line "no build" "gpu_basics: no built library in $work/nobuild: run scripts/build.sh"
not_installed "no build"

# 1b. A Python with torch (a stand-in package on PYTHONPATH) and a build tree without a c10
#     library for it: setup.py configures the tree for that Python and builds the library, with a
#     stand-in cmake that fails here: one line naming the log, nothing installed. With
#     GPU_BASICS_NO_C10=1 the plain library alone is installed, and the package says why.
fake="$work/fakebuild"
mkdir -p "$fake/src/torch_alloc" "$work/fakebin" "$work/faketorch/torch"
cp "$build/src/torch_alloc/libgpu_basics_torch_alloc.so" "$fake/src/torch_alloc/"
printf 'CMAKE_HOME_DIRECTORY:INTERNAL=%s\n' "$src" >"$fake/CMakeCache.txt"
printf '#!/bin/sh\necho "CMake Error: stand-in cmake" >&2\nexit 1\n' >"$work/fakebin/cmake"
chmod +x "$work/fakebin/cmake"
printf '__version__ = "0.0.1+stand.in"\nclass _C:\n    _GLIBCXX_USE_CXX11_ABI = True\n' \
  >"$work/faketorch/torch/__init__.py"
with_torch() { PATH="$work/fakebin:$PATH" PYTHONPATH="$work/faketorch" "$@"; }
if with_torch pip_install "$fake"; then echo "FAIL: installed after a failed c10 build"; exit 1; fi
expect_one_line "c10 build fails" "gpu_basics: building the c10 library for torch \
0.0.1\+stand.in failed \(cmake configure: exit status 1\): see $fake/gpu_basics_c10_build.log; \
.*GPU_BASICS_NO_C10=1"
not_installed "c10 build fails"
log="$fake/gpu_basics_c10_build.log"
grep -q "^\$ .*cmake -S $src -B $fake -DGPU_BASICS_TORCH_PYTHON=$venv/bin/python" "$log" &&
  grep -q "CMake Error: stand-in" "$log" ||
  { echo "FAIL: the log lacks the cmake line or its output:"; cat "$log"; exit 1; }
if ! GPU_BASICS_NO_C10=1 with_torch pip_install "$fake"; then
  cat "$work/pip.log"; echo "FAIL: GPU_BASICS_NO_C10=1 did not install"; exit 1
fi
(cd "$work" && "$venv/bin/python" -c "
import gpu_basics._version as v, glob, os, sys
libs = sorted(os.path.basename(p) for p in glob.glob(os.path.dirname(v.__file__) + '/_lib/*'))
assert libs == ['libgpu_basics_torch_alloc.so'], libs
note = 'warning: GPU_BASICS_NO_C10=1: bundling the plain library'
assert v.install_note.startswith(note), v.install_note
print('GPU_BASICS_NO_C10=1: installed the plain library alone:', v.install_note)")

# 2. From the build: the libraries and the CLI are bundled.
pip_install "$build" || { cat "$work/pip.log"; exit 1; }
bundled() { ls "$venv"/lib/python3*/site-packages/gpu_basics/"$1" 2>/dev/null | tr '\n' ' '; }
[ -n "$(bundled _lib/)" ] || { echo "FAIL: no library bundled"; exit 1; }
cli=0   # a build with GPU_BASICS_BUILD_APPS=OFF has no gpu-basics to bundle
if [ -x "$build/gpu-basics" ]; then
  cli=1
  [ -x "$(echo "$venv"/lib/python3*/site-packages/gpu_basics/_bin/gpu-basics)" ] ||
    { echo "FAIL: no executable gpu-basics bundled"; exit 1; }
else
  echo "note: no $build/gpu-basics (GPU_BASICS_BUILD_APPS=OFF?): the CLI is not checked"
fi

# 3. A stale library in python/build/lib (from step 2) is never shipped: without a build the
#    install fails; with GPU_BASICS_ALLOW_NO_LIBRARY=1 it installs no library at all.
[ -n "$(ls "$work"/src/python/build/lib*/gpu_basics/_lib/*.so 2>/dev/null)" ] ||
  echo "note: pip left no python/build/lib: the stale case is checked on an empty _lib"
if pip_install /nonexistent; then echo "FAIL: installed with no build dir"; exit 1; fi
expect_one_line "stale build/lib" "gpu_basics: no built library in /nonexistent: "
if ! GPU_BASICS_ALLOW_NO_LIBRARY=1 pip_install "$work/nobuild"; then
  cat "$work/pip.log"; echo "FAIL: GPU_BASICS_ALLOW_NO_LIBRARY=1 did not install"; exit 1
fi
[ -z "$(bundled _lib/)$(bundled _bin/)" ] ||
  { echo "FAIL: stale files shipped: $(bundled _lib/)$(bundled _bin/)"; exit 1; }
echo "stale build/lib: GPU_BASICS_ALLOW_NO_LIBRARY=1 installed no library and no CLI"
out="$(cd "$work" && "$venv/bin/gpu-basics" --version 2>&1)" && rc=0 || rc=$?
if [ "$rc" != 2 ] || [ "$(printf '%s\n' "$out" | wc -l)" != 1 ]; then
  echo "FAIL: gpu-basics without a bundled CLI: exit $rc, '$out'"; exit 1
fi
echo "no bundled CLI: exit 2: $out"

# 4. A Python whose setuptools lacks bdist_wheel, without `wheel` (a plain venv of Python < 3.12
#    has setuptools and no wheel): one line saying what to install.
"$py" -m venv "$work/plain" >/dev/null 2>&1 || true
if [ -x "$work/plain/bin/python" ] && "$work/plain/bin/python" -c "
import importlib.util as u, sys
sys.exit(not u.find_spec('setuptools') or bool(u.find_spec('wheel'))
         or bool(u.find_spec('setuptools.command.bdist_wheel')))"; then
  if pip_install "$build" "$work/plain/bin/python"; then echo "FAIL: installed without wheel"; exit 1; fi
  expect_one_line "no wheel" "gpu_basics: building the package needs the .wheel. package.*python3-wheel"
else
  echo "no wheel: skipped (a plain venv of $py has no setuptools, or a bdist_wheel)"
fi

# 5. A read-only source tree (pip builds in place): setup.py builds in a temporary folder. Root
#    writes anywhere, so as root the install runs as `nobody`, into a venv of its own.
ro="$work/ro"
mkdir -p "$ro/src" "$ro/home"
cp -r "$src/python" "$ro/src/python"
cp "$src/VERSION" "$ro/src/VERSION"
rm -rf "$ro/src/python/build" "$ro/src/python/"*.egg-info
chmod -R a-w "$ro/src"
as=()
if [ "$(id -u)" = 0 ]; then
  if command -v runuser >/dev/null && id nobody >/dev/null 2>&1; then
    as=(runuser -u nobody --)
    chmod 777 "$ro" "$ro/home"
  else
    as=(skip)
  fi
fi
if [ "${as[0]:-}" = skip ]; then
  echo "read-only tree: skipped (root, and no runuser or no user nobody)"
else
  "${as[@]}" env HOME="$ro/home" "$py" -m venv --system-site-packages "$ro/venv"
  if ! "${as[@]}" env HOME="$ro/home" GPU_BASICS_BUILD_DIR="$build" "$ro/venv/bin/python" -m pip \
      install --no-build-isolation --no-index --disable-pip-version-check --no-deps -q \
      "$ro/src/python" >"$work/pip.log" 2>&1; then
    cat "$work/pip.log"; echo "FAIL: install from a read-only tree"; exit 1
  fi
  [ -z "$(ls -A "$ro/src/python" | grep -E '^build$|egg-info')" ] ||
    { echo "FAIL: the read-only tree was written to"; exit 1; }
  (cd "$ro" && "${as[@]}" env HOME="$ro/home" "$ro/venv/bin/python" -c \
    "import gpu_basics; print('read-only tree: installed', gpu_basics.__version__)")
fi
chmod -R u+w "$ro"

# 6. The install that works, then checked away from the source tree.
pip_install "$build" || { cat "$work/pip.log"; exit 1; }
rm -rf "$work/src"   # the installed copy must not read the repository's VERSION
cd "$work"   # away from the source tree: the installed copy must work on its own
if [ "$cli" = 1 ]; then
  got="$(env -u GPU_BASICS_CLI "$venv/bin/gpu-basics" --version)"
  [ "$(echo "$got" | awk 'NR==1 {print $2}')" = "$version" ] ||
    { echo "FAIL: gpu-basics --version says '$got', VERSION is $version"; exit 1; }
  echo "gpu-basics --version: $got"
  help="$(env -u GPU_BASICS_CLI "$venv/bin/python" -m gpu_basics --help)"
  for word in advise replay show report; do
    echo "$help" | grep -q -E "^  $word " ||
      { echo "FAIL: python -m gpu_basics --help lacks $word:"; echo "$help"; exit 1; }
  done
  echo "python -m gpu_basics --help: $(echo "$help" | head -1)"
fi
env -u GPU_BASICS_TORCH_ALLOC_LIB GPU_BASICS_VERSION="$version" \
  "$venv/bin/python" - <<'PY'
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
for bad, error in (("expandable_segments:True\x00garbage:zzz", ValueError), (None, TypeError)):
    try:
        gpu_basics.check_conf(bad)
        raise SystemExit(f"check_conf({bad!r}) was accepted")
    except error as e:
        assert "\n" not in str(e) and "\x00" not in str(e), repr(str(e))
        print(f"check_conf({bad!r}) refused:", e)
assert info["library"] == os.path.basename(info["path"]), info
try:
    import torch  # noqa: F401
    assert "c10 library" in info["install"], info["install"]
except ImportError:  # no torch: bundled as built, and the note says what to do
    assert "install torch first, then reinstall" in info["install"], info["install"]
print("installed:", gpu_basics.__version__, info["path"], "oom:", info["oom_exception"])
print("install note:", info["install"])
PY
