"""Advice at the moment a job runs out of memory, from the snapshot taken then (no PyTorch needed
here: gpu_basics.torch.watch() and use(on_oom="advise") hand the snapshot in).

The snapshot is pickled and advised in this process by the library's gpu_basics_torch_advise()
(`gpu-basics advise` on bytes): every allocator policy replayed on a simulated device under the
memory the job had, the failing request replayed last. The snapshot (gzip) and the advice (text
and JSON) are written into one folder; a few lines on stderr say which policy would have fitted,
the line to apply, and where in the code the failing request was made."""
from __future__ import annotations

import gzip
import json
import os
import pickle
import sys
import threading
import time
from typing import Optional

from ._native import printable

PREFIX = "gpu_basics.watch"
_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_size(size) -> Optional[int]:
    """A byte count from an int or a string such as "24GiB" or "9.5GB" (None stays None)."""
    if size is None:
        return None
    if isinstance(size, bool) or not isinstance(size, (int, str)):
        raise TypeError(f"fit: expected bytes as an int or a size such as '24GiB', got {size!r}")
    if isinstance(size, int):
        n = size
    else:
        text = size.strip().replace(" ", "")
        i = len(text)
        while i and text[i - 1].isalpha():
            i -= 1
        unit = text[i:].lower()
        try:
            n = round(float(text[:i]) * _UNITS[unit])
        except (KeyError, ValueError):
            raise ValueError(f"fit: {size!r} is not a size (24GiB, 9.5GB, 1073741824)") from None
    if n <= 0:
        raise ValueError(f"fit: {size!r} must be a positive size")
    return n


def size_text(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.2f} {unit}" if unit != "B" else f"{n} B"
        n /= 1024
    return f"{n:.2f} GiB"  # pragma: no cover


def failing_request(snapshot: dict, device: int) -> Optional[dict]:
    """The trace entry of the request that ran out of memory: the device's last oom entry (PyTorch
    records one before it raises), or None where the trace has none."""
    traces = snapshot.get("device_traces") or []
    if not 0 <= device < len(traces):
        return None
    for entry in reversed(traces[device] or []):
        if isinstance(entry, dict) and entry.get("action") == "oom":
            return entry
    return None


def python_frames(entry: Optional[dict], most: int = 16) -> list:
    """"file:line in function" of the entry's Python frames, innermost first."""
    out = []
    for f in (entry or {}).get("frames") or []:
        if not isinstance(f, dict) or not str(f.get("filename", "")).endswith(".py"):
            continue
        out.append(printable(f"{f.get('filename')}:{f.get('line')} in {f.get('name')}"))
        if len(out) == most:
            break
    return out


def reserved_bytes(snapshot: dict, device: int) -> int:
    """What the device's segments held when the snapshot was taken."""
    return sum(int(s.get("total_size", 0)) for s in snapshot.get("segments") or []
               if isinstance(s, dict) and s.get("device", 0) == device)


def new_directory(directory: Optional[str]) -> str:
    """`directory` (created), or a new gpu_basics_oom_YYYYmmdd-HHMMSS folder here."""
    if directory is not None:
        os.makedirs(directory, exist_ok=True)
        return directory
    base = time.strftime("gpu_basics_oom_%Y%m%d-%H%M%S")
    path, k = base, 1
    while True:
        try:
            os.makedirs(path)
            return path
        except FileExistsError:
            k += 1
            path = f"{base}-{k}"


MOST_ADVICE = 3  # advices per job at most, by default


def request_stack(skip: str = os.path.dirname(os.path.abspath(__file__))) -> tuple:
    """(file, line) of each Python frame of the calling thread, innermost first, this package's
    own left out: where the request that ran out of memory was made (the allocator calls the
    observer on the thread that asked, before it raises). Cheap: no source lines are read."""
    out = []
    f = sys._getframe(1)
    while f is not None:
        name = f.f_code.co_filename
        if not os.path.abspath(name).startswith(skip + os.sep):
            out.append((name, f.f_lineno))
        f = f.f_back
    return tuple(out)


class Budget:
    """When an out-of-memory error is advised. Not only the first: PyTorch and user code catch
    some and go on (a cuDNN or cuBLAS workspace retried smaller, a try/except that halves the
    batch), and the error that ends the job comes later. Each error is advised unless it is the
    same request as one advised already (same device, size and Python stack: a loop that retries
    it as it was) or `most` advices were given (each takes seconds at 100,000 events); those print
    one line. Two threads out of memory at once: one advises, the other prints a line."""

    def __init__(self, most: int = MOST_ADVICE, knob: Optional[str] = "watch(max_advice=...)"):
        if not isinstance(most, int) or isinstance(most, bool) or most <= 0:
            raise ValueError(f"max_advice must be a positive int, got {most!r}")
        self.most, self.knob = most, knob
        self.given = 0
        self.last_folder: Optional[str] = None
        self._seen = set()
        self._busy = threading.Lock()

    def run(self, advise_fn, device: int, size: int, key=None) -> None:
        """Calls advise_fn(number) (which prints the advice and returns its folder) through
        report() when this error is to be advised, else prints the line that says why not."""
        key = (int(device), int(size), request_stack() if key is None else key)
        if not self._busy.acquire(blocking=False):
            report(lambda: f"{PREFIX}: out of memory on GPU {device} while another thread's "
                           f"advice is being written (not advised)\n")
            return
        try:
            if key in self._seen:
                report(lambda: f"{PREFIX}: out of memory again on GPU {device}: the same request "
                               f"({size_text(int(size))} from the same Python stack) as one "
                               f"advised already (not advised again)\n")
            elif self.given >= self.most:
                report(lambda: f"{PREFIX}: out of memory again on GPU {device} (a request of "
                               f"{size_text(int(size))}): not advised, {self.given} advices "
                               f"given already, the most in this job"
                               + (f" ({self.knob})" if self.knob else "")
                               + f"; the last is in {self.last_folder}\n")
            else:
                self._seen.add(key)
                self.given += 1
                report(advise_fn, self.given)
        finally:
            self._busy.release()

    def note(self, number: int) -> str:
        """The line the advice ends with when it is the last one this job gives."""
        if number < self.most:
            return ""
        return (f"{PREFIX}: this was advice {number} of at most {self.most} in this job: a later "
                f"out-of-memory error prints one line"
                + (f" ({self.knob} gives more)" if self.knob else "") + ".\n")

    def folder(self, directory: Optional[str], number: int) -> Optional[str]:
        """The folder of advice `number`: `directory` for the first, `directory`-N after it (a
        new timestamped one each time where none was given)."""
        if directory is None or number == 1:
            return directory
        return f"{directory.rstrip(os.sep)}-{number}"


def advise(lib, snapshot: dict, device: int, allowed: int, device_free: int,
           device_memory: Optional[int], directory: Optional[str] = None,
           fit: Optional[int] = None, allocator: str = "PyTorch's",
           line_key: str = "torch_env") -> str:
    """Advises on `snapshot`, taken as a request ran out of memory on `device`, writes the
    snapshot and the advice into a folder and returns the text printed for it. allowed: the
    memory the process may reserve (the memory fraction's, else the device's); device_free: what
    CUDA still had free then; device_memory: the device's total (the line's fraction is a
    number); fit: the limit to advise for instead of the memory the job had; line_key: the line
    of the advice's "recommended" printed ("gbt" for gpu-basics' allocator)."""
    reserved = reserved_bytes(snapshot, device)
    available = min(allowed, reserved + device_free) if allowed else reserved + device_free
    limit = fit or available or None  # none known (no CUDA figures): advise without a limit
    folder = new_directory(directory)
    data = pickle.dumps(snapshot, protocol=4)
    snap_path = os.path.join(folder, "snapshot.pickle.gz")
    with gzip.open(snap_path, "wb", compresslevel=1) as f:  # fast, at the error
        f.write(data)
    doc, text = lib.advise(data, limit_bytes=limit, device_memory_bytes=device_memory,
                           device=device, name=os.path.basename(snap_path))
    json_path = os.path.join(folder, "advice.json")
    with open(json_path, "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
    text_path = os.path.join(folder, "advice.txt")
    with open(text_path, "w") as f:
        f.write(text)

    replayed = doc.get("failed_request_bytes")  # the request the advice replayed last
    request = failing_request(snapshot, device) if replayed is not None else None
    frames = python_frames(request)
    held = (f"{size_text(available)} available to this process ({size_text(reserved)} reserved, "
            f"{size_text(device_free)} free on the device"
            + (f", {size_text(allowed)} allowed" if allowed else "") + ")")
    if replayed is not None:
        out = [f"{PREFIX}: out of memory on GPU {device} with {allocator} allocator: a request of "
               f"{size_text(int(replayed))} failed with {held}."]
        out.append(f"{PREFIX}: the recorded trace covers the job only up to the failing request "
                   f"(replayed last): the advice is for the job so far, not for what it would "
                   f"have asked for next.")
    else:
        out = [f"{PREFIX}: out of memory on GPU {device} with {allocator} allocator, with {held}."]
        out.append(f"{PREFIX}: the snapshot does not end in the failing request (the history "
                   f"holds no out-of-memory entry after the last allocation): the advice covers "
                   f"the job up to its last recorded request only.")
    if frames:
        out.append(f"{PREFIX}: the failing request was made at (innermost first):")
        out += [f"    {fr}" for fr in frames]
    else:
        out.append(f"{PREFIX}: the failing request has no Python frames in the snapshot.")
    choice = (doc.get("fit_choice") or [None])[0]
    everywhere = (doc.get("fit_choice_everywhere") or [True])[0]
    caveat = "" if everywhere else " (not under every placement of segments: see the advice)"
    rec = doc.get("recommended", {})
    line = rec.get(line_key) or rec.get("torch_env", "")
    what = "the memory it had" if not fit else "the limit asked for"
    if limit is None:
        out.append(f"{PREFIX}: the memory available is unknown: the policy of the lowest peak:")
    elif choice is None:
        out.append(f"{PREFIX}: no searched policy fits {size_text(limit)} ({what}) in the "
                   f"replay; the one that needs least:")
    elif choice == "":
        out.append(f"{PREFIX}: PyTorch's defaults fit {size_text(limit)} ({what}) in the replay"
                   f"{caveat or ' (where the driver placed segments decided it)'}; apply:")
    else:
        out.append(f"{PREFIX}: {printable(choice)} would have fitted {size_text(limit)} ({what}) "
                   f"in the replay{caveat}; apply:")
    out.append(f"    {printable(line)}")
    out.append(f"{PREFIX}: written {snap_path}, {text_path} and {json_path} (`gpu-basics report "
               f"{json_path} -o advice.html` draws it"
               + (f"; `gpu-basics advise {snap_path} --fit {limit}"
                  + (f" --device-memory {device_memory}" if device_memory else "")
                  + "` gives it again" if limit else "") + ").")
    return "\n".join(out) + "\n"


def report(run, *args, **kwargs) -> None:
    """Calls run(*args, **kwargs) and prints its text on stderr; any failure is one line, never
    raised (this runs inside the allocator's out-of-memory path)."""
    try:
        text = run(*args, **kwargs)
        sys.stderr.write(text)
    except BaseException as e:  # noqa: BLE001 - nothing may escape into the allocator
        try:
            why = (printable(str(e)).splitlines() or [""])[0]
            sys.stderr.write(f"{PREFIX}: no advice: {type(e).__name__}"
                             + (f": {why}" if why else "") + "\n")
        except BaseException:  # noqa: BLE001
            pass
    try:
        sys.stderr.flush()
    except BaseException:  # noqa: BLE001
        pass
