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
into the package as gpu_basics/_version.py."""
import atexit
import glob
import importlib.util
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


def bundle() -> tuple:
    """(build tree, allocator files, the CLI or None); fails in one line without a library,
    unless GPU_BASICS_ALLOW_NO_LIBRARY=1."""
    build = build_dir()
    libs = [p for name in LIBRARIES
            for p in glob.glob(os.path.join(build, "src", "torch_alloc", name))]
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
        super().run()
        package = os.path.join(self.build_lib, "gpu_basics")
        with open(os.path.join(package, "_version.py"), "w", encoding="utf-8") as f:
            f.write(f'# Written by setup.py from the repository\'s VERSION file.\n'
                    f'version = "{VERSION}"\n')
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
check_wheel_support()
if "dist_info" in sys.argv[1:]:
    bundle()  # the missing library is said before pip's metadata step, not after a build
setup(version=VERSION, cmdclass={"build_py": BuildPyWithLibraries}, options=out_of_tree_options())
