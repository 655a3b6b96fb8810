"""Bundles a gpu-basics build into the package, so that `pip install --no-build-isolation
./python` gives a package that works outside the tree: the allocator libraries (gpu_basics/_lib/)
and the `gpu-basics` executable (gpu_basics/_bin/, run by the `gpu-basics` console script and by
`python -m gpu_basics`).

The build tree is GPU_BASICS_BUILD_DIR, else build/default of this repository. Without an
allocator library there, the install fails with one line saying what to run; a packager who will
set GPU_BASICS_TORCH_ALLOC_LIB at run time sets GPU_BASICS_ALLOW_NO_LIBRARY=1 to install without
one. _lib/ and _bin/ are emptied before each copy, so a library left in python/build/ by an earlier
install is never shipped. A read-only tree builds in a temporary folder. Metadata lives in pyproject.toml, except the version: the repository's
VERSION file is the one source of it (the library, the CLI and this package say the same), written
into the package as gpu_basics/_version.py.

The library that raises torch.OutOfMemoryError (libgpu_basics_torch_alloc_c10.so) is built for
one torch: that of the Python running pip. Where that Python imports torch and the build tree has
no c10 library for it (gpu_basics_torch_alloc_c10.json beside the library says which torch it was
built for), the build tree is configured for that Python (-DGPU_BASICS_TORCH_PYTHON) and only that
library is built, its output in gpu_basics_c10_build.log of the build tree; a failed build fails
the install in one line naming the log. GPU_BASICS_NO_C10=1 builds nothing and bundles the plain
library. Where the Python has no torch, the build is bundled as it is. One line says which."""
import atexit
import glob
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import warnings

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
VERSION_FILE = os.path.join(os.path.dirname(HERE), "VERSION")
LIBRARIES = ("libgpu_basics_torch_alloc.so", "libgpu_basics_torch_alloc_c10.so",
             "gpu_basics_torch_alloc_c10.json")
CLI = "gpu-basics"
ALLOW_NO_LIBRARY = "GPU_BASICS_ALLOW_NO_LIBRARY"
NO_C10 = "GPU_BASICS_NO_C10"
C10_LIB, C10_JSON = LIBRARIES[1], LIBRARIES[2]
C10_TARGET = "gpu_basics_torch_alloc_c10"
C10_LOG = "gpu_basics_c10_build.log"
# What the Python running pip says of its torch (cmake/torch.cmake asks the same).
TORCH_PROBE = ("import json, os, torch; print(json.dumps({'version': torch.__version__, "
               "'dir': os.path.dirname(torch.__file__), "
               "'cxx11_abi': int(getattr(torch._C, '_GLIBCXX_USE_CXX11_ABI', 1))}))")
# The commands that build a wheel (pip runs dist_info, then bdist_wheel; both need `wheel` where
# setuptools does not carry bdist_wheel itself, before 70.1).
WHEEL_COMMANDS = ("bdist_wheel", "dist_info")

warnings.filterwarnings("ignore", message=r".*\[tool\.setuptools\].*beta")


def fail(message: str) -> None:
    """One line on stderr and exit status 1, without a traceback."""
    raise SystemExit(f"gpu_basics: {message}")


def read_version() -> str:
    try:
        with open(VERSION_FILE, encoding="utf-8") as f:
            return f.read().strip()
    except OSError as e:
        fail(f"cannot read the version from {VERSION_FILE} ({e}); install from the repository "
             "(pip install ./python)")


def build_dir() -> str:
    return os.environ.get("GPU_BASICS_BUILD_DIR") or os.path.join(os.path.dirname(HERE), "build",
                                                                   "default")


def built_libraries(build: str) -> list:
    return [p for name in LIBRARIES
            for p in glob.glob(os.path.join(build, "src", "torch_alloc", name))]


def torch_of(python: str, timeout: float = 120) -> tuple:
    """({"version", "dir", "cxx11_abi"} of the torch `python` imports, None) or (None, why not),
    asked in a subprocess: importing torch here would load its libraries into setuptools."""
    try:
        out = subprocess.run([python, "-c", TORCH_PROBE], capture_output=True, text=True,
                             timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return None, f"`import torch` took over {timeout:g} s"
    except OSError as e:
        return None, f"cannot run {python}: {e.strerror or e}"
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or [f"exit status {out.returncode}"])[-1]
        return None, f"`import torch` failed: {last.strip()}"
    try:
        info = json.loads(out.stdout.strip().splitlines()[-1])
        info = {"version": str(info["version"]), "dir": str(info["dir"]),
                "cxx11_abi": int(info["cxx11_abi"])}
    except (ValueError, KeyError, IndexError, TypeError):
        return None, f"unreadable answer to the torch probe: {out.stdout.strip()[:200]!r}"
    return info, None


def c10_built_for(build: str):
    """What the build tree's c10 library was built for (its JSON), or None where there is none."""
    folder = os.path.join(build, "src", "torch_alloc")
    if not os.path.isfile(os.path.join(folder, C10_LIB)):
        return None
    try:
        with open(os.path.join(folder, C10_JSON), encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def same_torch(built, torch: dict) -> bool:
    if not isinstance(built, dict) or built.get("torch") != torch["version"]:
        return False
    built_dir = built.get("torch_dir") or ""
    return bool(built_dir) and os.path.realpath(built_dir) == os.path.realpath(torch["dir"])


def cache_value(build: str, key: str):
    """A value of the build tree's CMakeCache.txt, or None."""
    try:
        with open(os.path.join(build, "CMakeCache.txt"), encoding="utf-8") as f:
            for line in f:
                name, sep, value = line.rstrip("\n").partition("=")
                if sep and name.split(":")[0] == key:
                    return value
    except OSError:
        pass
    return None


def c10_plan(build: str, python: str, env=None) -> dict:
    """What to do about the c10 library for `python`'s torch: action "keep" (bundle the build
    as it is), "plain" (bundle without the c10 library) or "build" (run `commands`, their output
    in `log`), and the one line that says so."""
    env = os.environ if env is None else env
    plain = "out of memory raises RuntimeError, not torch.OutOfMemoryError"
    if env.get(NO_C10) == "1":
        return {"action": "plain",
                "line": f"warning: {NO_C10}=1: bundling the plain library ({plain})"}
    torch, why = torch_of(python)
    if torch is None:
        return {"action": "keep",
                "line": f"no torch for {python} ({why}): torch.OutOfMemoryError needs the c10 "
                        "library: install torch first, then reinstall this package (with "
                        "--no-build-isolation: pip's isolated build does not see it)"}
    named = f"torch {torch['version']} ({torch['dir']})"
    if same_torch(c10_built_for(build), torch):
        return {"action": "keep", "line": f"the c10 library of {build} is built for {named}",
                "torch": torch}
    if not torch["cxx11_abi"]:
        return {"action": "plain", "torch": torch,
                "line": f"warning: {named} uses the pre-C++11 std::string ABI: no c10 library "
                        f"can be built for it; bundling the plain library ({plain})"}
    source = cache_value(build, "CMAKE_HOME_DIRECTORY")
    if not source:
        return {"action": "plain", "torch": torch,
                "line": f"warning: {build} has no CMakeCache.txt: no c10 library can be built "
                        f"there for {named}; bundling the plain library ({plain})"}
    cmake = shutil.which("cmake", path=env.get("PATH")) or cache_value(build, "CMAKE_COMMAND")
    cmake = cmake or "cmake"
    return {"action": "build", "torch": torch, "log": os.path.join(build, C10_LOG),
            "line": f"built the c10 library for {named} in {build}",
            "commands": [[cmake, "-S", source, "-B", build, f"-DGPU_BASICS_TORCH_PYTHON={python}",
                          f"-DGPU_BASICS_TORCH_DIR={torch['dir']}"],
                         [cmake, "--build", build, "--target", C10_TARGET]]}


def carry_out(plan: dict, build: str) -> list:
    """Runs a "build" plan (failing in one line naming its log); the files to bundle."""
    if plan["action"] == "build":
        torch = plan["torch"]
        named = f"torch {torch['version']}"
        redo = f"fix it and reinstall, or set {NO_C10}=1 to install the plain library"
        try:
            with open(plan["log"], "w", encoding="utf-8") as log:
                for step, command in zip(("cmake configure", "cmake --build"),
                                         plan["commands"]):
                    log.write(f"$ {' '.join(command)}\n")
                    log.flush()
                    rc = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL).returncode
                    if rc != 0:
                        fail(f"building the c10 library for {named} failed ({step}: exit status "
                             f"{rc}): see {plan['log']}; {redo}")
        except OSError as e:
            fail(f"building the c10 library for {named}: {e}; {redo}")
        built = c10_built_for(build)
        if not same_torch(built, torch):
            fail(f"the build for {named} left no c10 library for it in {build} (found: "
                 f"{(built or {}).get('torch')}): see {plan['log']}; {redo}")
    libs = built_libraries(build)
    if plan["action"] == "plain":
        libs = [p for p in libs if os.path.basename(p) not in (C10_LIB, C10_JSON)]
    return libs


def bundle() -> tuple:
    """(build tree, allocator files, the CLI or None); fails in one line without a library,
    unless GPU_BASICS_ALLOW_NO_LIBRARY=1."""
    build = build_dir()
    libs = built_libraries(build)
    if not any(p.endswith(".so") for p in libs) and os.environ.get(ALLOW_NO_LIBRARY) != "1":
        fail(f"no built library in {build}: run scripts/build.sh first, or set "
             f"GPU_BASICS_BUILD_DIR (or {ALLOW_NO_LIBRARY}=1 where GPU_BASICS_TORCH_ALLOC_LIB will "
             "name one at run time)")
    cli = os.path.join(build, CLI)
    if not (os.path.isfile(cli) and os.access(cli, os.X_OK)):
        return build, libs, None
    said = cli_version(cli)
    if said is not None and said != VERSION:
        fail(f"{cli} is version {said}, this tree is {VERSION}: rebuild (scripts/build.sh), or set "
             "GPU_BASICS_BUILD_DIR to a build of this tree")
    return build, libs, cli


def cli_version(cli: str):
    """The version `gpu-basics --version` says, or None where it cannot run here (no CUDA
    runtime on the machine that builds the package)."""
    try:
        out = subprocess.run([cli, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    words = out.stdout.split()
    if out.returncode != 0 or len(words) < 2 or words[0] != CLI:
        return None
    return words[1]


def check_wheel_support() -> None:
    """A Python whose setuptools lacks bdist_wheel (a plain venv, pyenv) without `wheel`: one
    line saying what to install, not setuptools' "invalid command 'bdist_wheel'"."""
    if not any(c in sys.argv[1:] for c in WHEEL_COMMANDS):
        return
    if importlib.util.find_spec("wheel") is not None:
        return
    if importlib.util.find_spec("setuptools.command.bdist_wheel") is not None:
        return
    fail("building the package needs the `wheel` package, missing from this Python "
         f"({sys.executable}): install python3-wheel (Debian) or run `pip install wheel`")


def out_of_tree_options() -> dict:
    """setuptools writes build/ and the egg-info beside setup.py; from a read-only tree (a
    checkout on a read-only mount, a system-owned copy) they go to a temporary folder instead,
    removed at exit."""
    if os.access(HERE, os.W_OK):
        return {}
    scratch = tempfile.mkdtemp(prefix="gpu_basics-build-")
    atexit.register(shutil.rmtree, scratch, True)
    return {"build": {"build_base": os.path.join(scratch, "build")},
            "egg_info": {"egg_base": scratch}}


def empty(folder: str) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)


class BuildPyWithLibraries(build_py):
    def run(self):
        build, libs, cli = bundle()
        note = None
        if libs:
            plan = c10_plan(build, sys.executable)
            libs = carry_out(plan, build)
            note = plan["line"]
            print(f"gpu_basics: {note}")
        super().run()
        package = os.path.join(self.build_lib, "gpu_basics")
        with open(os.path.join(package, "_version.py"), "w", encoding="utf-8") as f:
            f.write(f'# Written by setup.py from the repository\'s VERSION file.\n'
                    f'version = "{VERSION}"\n'
                    f'# What setup.py did about the c10 library, as it said it.\n'
                    f'install_note = {note!r}\n')
        lib_dir, bin_dir = os.path.join(package, "_lib"), os.path.join(package, "_bin")
        empty(lib_dir)
        empty(bin_dir)
        for p in libs:
            shutil.copy2(os.path.realpath(p), os.path.join(lib_dir, os.path.basename(p)))
        if cli:
            shutil.copy2(os.path.realpath(cli), os.path.join(bin_dir, CLI))
        print(f"gpu_basics: bundled {[os.path.basename(p) for p in libs] or 'no library'} and "
              f"{CLI if cli else f'no {CLI} executable'} from {build}")


VERSION = read_version()
if __name__ == "__main__":  # as setuptools runs it; python/tests import the functions above
    check_wheel_support()
    if "dist_info" in sys.argv[1:]:
        bundle()  # the missing library is said before pip's metadata step, not after a build
    setup(version=VERSION, cmdclass={"build_py": BuildPyWithLibraries},
          options=out_of_tree_options())
