"""Pre-flight from inside the job: records the user's training step at two or three small batch
sizes in this process, then asks `gpu-basics preflight` what the peak memory is at batches never
run and, with `fit`, the largest batch that fits (docs/preflight.md, "From Python").

    import gpu_basics.torch as gbt
    result = gbt.preflight(lambda b: train_step(b), batches=(2, 4, 8), at=(64,), fit="40GiB")
    result["largest_batch"]["defaults"]

Each batch is recorded from a clean state: the cache emptied (torch.cuda.empty_cache()), the peaks
reset, PyTorch's memory history turned on before the first call of step(batch) and off after the
snapshot is dumped, then everything freed again (gc.collect(), empty_cache()). The recordings share
one process: what the job keeps between steps (the model, the optimizer's state) stays, and the
snapshot holds only what happens while recording (blocks alive before are listed as the snapshot's
segments), so each recording starts from nothing cached, not from a fresh process.
"""
from __future__ import annotations

import gc
import json
import os
import shutil
import subprocess
import sys
import tempfile
from typing import Callable, Iterable, Optional, Union

from . import _cli
from ._native import GpuBasicsError

__all__ = ["preflight", "PreflightError", "find_cli"]


class PreflightError(GpuBasicsError):
    """`gpu-basics preflight` did not answer: its message (the recordings cannot be modelled,
    exit code 2, or another failure), with the exit code as `exit_code`."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code


def find_cli(gpu_basics: str = "gpu-basics") -> str:
    """The gpu-basics executable: `gpu_basics` itself where it names a file (a path), else that
    name on PATH, else the package's own (gpu_basics._cli: GPU_BASICS_CLI, the bundled executable,
    a build tree of the repository). Raises FileNotFoundError with one line."""
    if os.sep in gpu_basics or (os.altsep and os.altsep in gpu_basics):
        if os.path.isfile(gpu_basics) and os.access(gpu_basics, os.X_OK):
            return gpu_basics
        raise FileNotFoundError(f"gpu_basics={gpu_basics!r}: not an executable file")
    found = shutil.which(gpu_basics)
    if found:
        return found
    if gpu_basics != _cli.NAME:
        raise FileNotFoundError(f"gpu_basics={gpu_basics!r}: not found on PATH")
    return _cli.find_executable()


def _batches(batches: Iterable[int]) -> list:
    out = [int(b) for b in batches]
    if len(out) not in (2, 3):
        raise ValueError(f"batches: two or three batch sizes, got {len(out)}")
    if out[0] < 1 or any(b <= a for a, b in zip(out, out[1:])):
        raise ValueError(f"batches: increasing batch sizes of at least 1, got {tuple(out)}")
    return out


def _free(torch) -> None:
    gc.collect()
    torch.cuda.empty_cache()


def _record(torch, step: Callable, batch: int, steps: int, path: str, max_entries: int) -> None:
    """step(batch), `steps` times, recorded from a clean state into the snapshot at `path`."""
    memory = torch.cuda.memory
    _free(torch)
    torch.cuda.reset_peak_memory_stats()
    memory._record_memory_history(enabled="all", context="all", stacks="python",
                                  max_entries=max_entries)
    try:
        for _ in range(steps):
            step(batch)
        torch.cuda.synchronize()
        memory._dump_snapshot(path)
    finally:
        memory._record_memory_history(enabled=None)
        _free(torch)


def preflight(step: Callable[[int], object], batches=(2, 4, 8), steps: int = 3, at=(),
              fit: Optional[Union[int, str]] = None, gpu_basics: str = "gpu-basics",
              directory: Optional[str] = None, html: Optional[str] = None,
              max_entries: int = 1_000_000) -> dict:
    """Records step(b) `steps` times at each batch b of `batches` (2 or 3, increasing) in this
    process, then runs `gpu-basics preflight` on the snapshots: prints its tables and returns its
    JSON (docs/preflight.md: "predictions" at each of `at`, or at the recorded batches, and with
    `fit`, a limit such as "40GiB" or bytes, "largest_batch").

    The snapshots are written into `directory` (made where missing; kept) as b{batch}.pickle, or
    into a temporary folder removed afterwards. `html`: also draw the page (--html). `max_entries`:
    PyTorch's history is cut to its last max_entries events, and a recording cut short does not
    align with the others: enough for every event of `steps` steps.

    Raises PreflightError with preflight's message where it refuses the recordings (exit code 2)
    or fails; FileNotFoundError where no gpu-basics executable is found (before recording).
    """
    import torch  # the job's own

    if not callable(step):
        raise TypeError("step: a function of the batch size, step(batch)")
    recorded = _batches(batches)
    if int(steps) < 1:
        raise ValueError(f"steps: at least 1, got {steps}")
    at_args = []
    for b in at:
        at_args += ["--at", str(int(b))]
    fit_args = [] if fit is None else ["--fit", str(fit)]
    exe = find_cli(gpu_basics)
    own = directory is None
    folder = tempfile.mkdtemp(prefix="gpu-basics-preflight-") if own else directory
    try:
        os.makedirs(folder, exist_ok=True)
        paths = []
        for b in recorded:
            paths.append(os.path.join(folder, f"b{b}.pickle"))
            _record(torch, step, b, int(steps), paths[-1], max_entries)
        out_json = os.path.join(folder, "preflight.json")
        args = [exe, "preflight", *paths, "--batches", ",".join(map(str, recorded)), *at_args,
                *fit_args, "--json", out_json]
        if html is not None:
            args += ["--html", html]
        done = subprocess.run(args, capture_output=True, text=True)
        if done.returncode != 0:
            message = done.stderr.strip() or f"gpu-basics preflight exited {done.returncode}"
            raise PreflightError(message, done.returncode)
        sys.stdout.write(done.stdout)
        sys.stdout.flush()
        with open(out_json) as f:
            return json.load(f)
    finally:
        if own:
            shutil.rmtree(folder, ignore_errors=True)
