#!/usr/bin/env python3
"""One version everywhere: the repository's VERSION file, the CLI's --version (the library's
gpu_basics_version(), which the CLI prints), the installed CMake package, and the Python package
(its __version__ from the source tree, and the version setup.py gives pip) must say the same.

    check_version.py --source DIR --cli PATH/gpu-basics [--build DIR]

Exit 0 when they agree; 1 with one line per disagreement otherwise."""
import argparse
import os
import re
import subprocess
import sys


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def cli_version(exe):
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, check=True).stdout
    m = re.fullmatch(r"gpu-basics (\S+) \((\S+)\)\n", out)
    return m.group(1) if m else f"(unreadable: {out!r})"


def package_version(source):
    env = dict(os.environ, PYTHONPATH=os.path.join(source, "python"), PYTHONDONTWRITEBYTECODE="1")
    code = "import gpu_basics; print(gpu_basics.__version__)"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, env=env, cwd=source).stdout.strip()


def setup_version(source):
    """What pip installs: setup.py --version (None without setuptools)."""
    try:
        import setuptools  # noqa: F401
    except ImportError:
        return None
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", PYTHONWARNINGS="ignore")
    out = subprocess.run([sys.executable, "setup.py", "--version"], capture_output=True,
                         text=True, check=True, env=env, cwd=os.path.join(source, "python"))
    return out.stdout.strip().splitlines()[-1]


def cmake_package_version(build):
    text = read(os.path.join(build, "gpu_basicsConfigVersion.cmake"))
    m = re.search(r'set\(PACKAGE_VERSION "([^"]+)"\)', text)
    return m.group(1) if m else "(unreadable)"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", required=True)
    ap.add_argument("--cli", required=True)
    ap.add_argument("--build")
    a = ap.parse_args()
    want = read(os.path.join(a.source, "VERSION")).strip()
    problems = []
    if not re.fullmatch(r"\d+\.\d+\.\d+", want):
        problems.append(f"VERSION: expected MAJOR.MINOR.PATCH, got {want!r}")
    pyproject = read(os.path.join(a.source, "python", "pyproject.toml"))
    if re.search(r"^version\s*=", pyproject, re.MULTILINE):
        problems.append("python/pyproject.toml: a version of its own; it is VERSION's, through "
                        "setup.py (dynamic = [\"version\"])")
    found = {"gpu-basics --version": cli_version(a.cli),
             "gpu_basics.__version__ (Python)": package_version(a.source)}
    pip = setup_version(a.source)
    if pip is not None:
        found["python/setup.py --version"] = pip
    if a.build:
        found["gpu_basicsConfigVersion.cmake"] = cmake_package_version(a.build)
    for what, version in found.items():
        if version != want:
            problems.append(f"{what} says {version}, VERSION says {want}")
    for p in problems:
        print("check_version:", p)
    if not problems:
        print(f"check_version: {want} everywhere ({', '.join(found)})")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
