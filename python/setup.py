"""Bundles the allocator libraries of a gpu-basics build into the package (gpu_basics/_lib/), so
that `pip install --no-build-isolation ./python` gives a package that works outside the tree.

The build tree is GPU_BASICS_BUILD_DIR, else build/default of this repository. Without one the
package still installs, and finds a library at run time through GPU_BASICS_TORCH_ALLOC_LIB.
Metadata lives in pyproject.toml, except the version: the repository's VERSION file is the one
source of it (the library, the CLI and this package say the same), written into the package as
gpu_basics/_version.py."""
import glob
import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
VERSION_FILE = os.path.join(os.path.dirname(HERE), "VERSION")


def read_version() -> str:
    try:
        with open(VERSION_FILE, encoding="utf-8") as f:
            return f.read().strip()
    except OSError as e:
        raise SystemExit(f"gpu_basics: cannot read the version from {VERSION_FILE} ({e}); "
                         "install from the repository (pip install ./python)") from e


VERSION = read_version()
NAMES = ("libgpu_basics_torch_alloc.so", "libgpu_basics_torch_alloc_c10.so",
         "gpu_basics_torch_alloc_c10.json")


class BuildPyWithLibraries(build_py):
    def run(self):
        super().run()
        build = os.environ.get("GPU_BASICS_BUILD_DIR",
                               os.path.join(os.path.dirname(HERE), "build", "default"))
        found = [p for name in NAMES
                 for p in glob.glob(os.path.join(build, "src", "torch_alloc", name))]
        with open(os.path.join(self.build_lib, "gpu_basics", "_version.py"), "w",
                  encoding="utf-8") as f:
            f.write(f'# Written by setup.py from the repository\'s VERSION file.\n'
                    f'version = "{VERSION}"\n')
        target = os.path.join(self.build_lib, "gpu_basics", "_lib")
        os.makedirs(target, exist_ok=True)
        for p in found:
            shutil.copy2(os.path.realpath(p), os.path.join(target, os.path.basename(p)))
        print(f"gpu_basics: bundled {[os.path.basename(p) for p in found] or 'no library'} "
              f"from {build}")


setup(version=VERSION, cmdclass={"build_py": BuildPyWithLibraries})
