"""The `gpu-basics` command of an installed package (its console script, and `python -m
gpu_basics`): runs the executable setup.py bundled into gpu_basics/_bin/ with the same arguments
(advise, replay, show, report, ...). Looked for, in order: the path in GPU_BASICS_CLI, the
package's `_bin/gpu-basics`, a build tree of the repository the package is imported from
(`build/*/gpu-basics`). Without one: one line on stderr and exit status 2."""
from __future__ import annotations

import glob
import os
import sys
from typing import Optional

NAME = "gpu-basics"
ENV_CLI = "GPU_BASICS_CLI"
MISSING = 2


def _here() -> str:
    return os.path.dirname(os.path.abspath(__file__))


def candidates() -> list:
    repo = os.path.dirname(os.path.dirname(_here()))  # python/gpu_basics -> repository
    out = [os.path.join(_here(), "_bin", NAME)]
    for preset in ("default", "*"):
        out += sorted(glob.glob(os.path.join(repo, "build", preset, NAME)))
    return list(dict.fromkeys(out))


def _runnable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def find_executable() -> str:
    """The gpu-basics executable to run; raises FileNotFoundError with one line."""
    env = os.environ.get(ENV_CLI)
    if env:
        if not _runnable(env):
            raise FileNotFoundError(f"{ENV_CLI}={env!r}: not an executable file")
        return env
    for p in candidates():
        if _runnable(p):
            return p
    raise FileNotFoundError(
        f"no bundled {NAME} executable in {os.path.join(_here(), '_bin')}: build gpu-basics "
        f"(scripts/build.sh) and reinstall the package from that tree "
        f"(pip install --no-build-isolation ./python), or set {ENV_CLI}")


def main(argv: Optional[list] = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        path = find_executable()
    except FileNotFoundError as e:
        print(f"{NAME}: {e}", file=sys.stderr)
        return MISSING
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execv(path, [path] + args)
    except OSError as e:
        print(f"{NAME}: {path}: cannot be run: {e.strerror or e}", file=sys.stderr)
        return MISSING
    return 0  # not reached: execv replaces the process


if __name__ == "__main__":
    sys.exit(main())
