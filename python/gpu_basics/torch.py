"""gpu-basics' caching allocator as PyTorch's CUDA allocator, with PyTorch's memory API.

    import gpu_basics.torch as gbt
    gbt.use(conf="expandable_segments:True")     # once, before CUDA is initialised

or, for one region of a program, with PyTorch's allocator left in place:

    with torch.cuda.use_mem_pool(gbt.mem_pool()):
        ...

With the allocator installed, PyTorch's own torch.cuda.memory_stats(), max_memory_reserved(),
memory_summary() and _snapshot() raise (a pluggable allocator has none); the functions here have
the same names and keys: memory_stats(), memory_allocated(), max_memory_allocated(),
memory_reserved(), max_memory_reserved(), reset_peak_memory_stats(), empty_cache(),
memory_summary(), record_memory_history(), memory_snapshot(), dump_snapshot().

Out of memory raises torch.OutOfMemoryError with the allocator's figures when the library was
built against this PyTorch (libgpu_basics_torch_alloc_c10.so); with the plain library it raises
RuntimeError. build_info() says which is in use.

With PyTorch's own allocator, watch() records its history and, when the job runs out of memory,
prints which allocator policy would have fitted and the line to apply (gpu-basics advise, in this
process), and writes the snapshot and the advice into a folder:

    gbt.watch()

Before launch, preflight() records the job's step at two or three small batch sizes in this
process and predicts its peak memory at larger ones, and the largest batch that fits
(`gpu-basics preflight`; docs/preflight.md):

    gbt.preflight(lambda b: train_step(b), batches=(2, 4, 8), fit="40GiB")
"""
from __future__ import annotations

import collections
import os
import pickle
import sys
import tempfile
import warnings
from typing import Optional

try:
    import torch as _torch
except ImportError as _e:  # pragma: no cover - exercised by the CPU tests through a stub
    raise ImportError(f"gpu_basics.torch needs PyTorch: import torch failed ({_e})") from None

from . import _oom
from ._preflight import PreflightError, preflight
from ._native import (ENV_LIB, GpuBasicsError, Library, LibraryMismatch, LibraryNotFound,
                      describe, find_library, sidecar)

__all__ = ["use", "mem_pool", "installed", "build_info", "memory_stats", "memory_allocated",
           "max_memory_allocated", "memory_reserved", "max_memory_reserved",
           "reset_peak_memory_stats", "empty_cache", "memory_summary", "record_memory_history",
           "memory_snapshot", "dump_snapshot", "torch_stats", "watch", "preflight",
           "PreflightError"]

_lib: Optional[Library] = None
_mode: Optional[str] = None  # "allocator" (use) or "mem_pool"
_keep = []  # CUDAPluggableAllocator objects PyTorch holds raw pointers into


def _running_abi() -> int:
    return int(getattr(_torch._C, "_GLIBCXX_USE_CXX11_ABI", 1))


def _check_match(path: str, built: dict) -> None:
    want = (built.get("torch"), int(built.get("cxx11_abi", 1)))
    have = (_torch.__version__, _running_abi())
    if want != have:
        raise LibraryMismatch(
            f"{os.path.basename(path)} was built for torch {want[0]} (C++11 ABI {want[1]}), "
            f"this is torch {have[0]} (C++11 ABI {have[1]}): rebuild gpu-basics against this "
            f"torch, or use(library='plain') (out of memory then raises RuntimeError)")


def _load(library: str) -> Library:
    """The library for `library` ("auto", "c10", "plain" or a path), checked against this torch
    before it is loaded (a _c10 library for another torch could not even be loaded safely)."""
    if library not in ("auto", "c10", "plain"):
        path = library
    else:
        path = find_library({"auto": "any"}.get(library, library))
    built = sidecar(path)
    if built is not None:
        try:
            _check_match(path, built)
        except LibraryMismatch as e:
            if library != "auto" or os.environ.get(ENV_LIB):
                raise  # asked for by name or by GPU_BASICS_TORCH_ALLOC_LIB: no fallback
            try:  # auto: the plain library still works with any torch
                path = find_library("plain")
            except LibraryNotFound:
                raise e from None
            warnings.warn(f"gpu_basics: {e}; using {os.path.basename(path)} instead",
                          stacklevel=3)
    lib = Library(path)
    if lib.is_c10:
        _check_match(path, lib.build)
    return lib


def _device(device=None) -> int:
    if device is None:
        return _torch.cuda.current_device()
    if isinstance(device, int):
        return device
    d = _torch.device(device)
    if d.type != "cuda":
        raise ValueError(f"expected a CUDA device, got {device!r}")
    return d.index if d.index is not None else _torch.cuda.current_device()


def use(conf: Optional[str] = None, history: int = 0, library: str = "auto",
        on_oom: Optional[str] = None) -> dict:
    """Makes gpu-basics' allocator PyTorch's CUDA allocator, for every device.

    conf: options in PYTORCH_CUDA_ALLOC_CONF's syntax ("expandable_segments:True,
    max_split_size_mb:128,..."), plus page_release:deferred|eager|keep; default: the
    environment's GPU_BASICS_ALLOC_CONF, else PyTorch's defaults. history: allocator events kept
    for memory_snapshot() (record_memory_history() changes it later). library: "auto" (the one
    built against this torch where there is one; where the one found was built for another
    torch, the plain library, with a one-line warning), "c10", "plain", or a path.
    on_oom="advise": when an allocation runs out of memory, advice from the allocator's own
    history before the error is raised, as watch() gives it for PyTorch's allocator (history
    defaults to 100000 events then; the snapshot has no Python frames: the allocator records
    none).

    Must run before anything initialises CUDA in this process. Returns build_info()."""
    global _lib, _mode
    if _mode == "allocator":
        raise GpuBasicsError("gpu_basics.torch.use() was called already in this process")
    if on_oom not in (None, "advise"):
        raise ValueError(f"use(on_oom={on_oom!r}): expected None or 'advise'")
    if on_oom == "advise" and not history:
        history = 100_000
    if _torch.cuda.is_initialized():
        raise GpuBasicsError(
            "gpu_basics.torch.use() must run before CUDA is initialised (PyTorch cannot swap an "
            "allocator that has handed out memory): call it first thing, before any tensor is "
            "put on the GPU")
    if not _torch.cuda.is_available():
        raise GpuBasicsError("gpu_basics.torch.use(): no CUDA device visible to PyTorch "
                             f"(torch {_torch.__version__}, CUDA {_torch.version.cuda})")
    lib = _load(library)
    if conf is not None or history:
        lib.configure(conf if conf is not None else os.environ.get("GPU_BASICS_ALLOC_CONF", ""),
                      history)
    else:
        lib.conf()  # a bad GPU_BASICS_ALLOC_CONF is an error here, not at the first tensor
    alloc = _torch.cuda.memory.CUDAPluggableAllocator(lib.path, "gpu_basics_torch_alloc",
                                                      "gpu_basics_torch_free")
    inner = alloc.allocator()
    hooks = [("set_record_stream_fn", "gpu_basics_torch_record_stream"),
             ("set_reset_fn", "gpu_basics_torch_empty_cache"),
             ("set_memory_fraction_fn", "gpu_basics_torch_set_memory_fraction"),
             ("set_base_alloc_fn", "gpu_basics_torch_base_alloc")]
    if lib.is_c10:
        hooks.append(("set_begin_allocate_to_pool", "gpu_basics_torch_begin_allocate_to_pool"))
    for setter, fn in hooks:
        if hasattr(inner, setter):
            getattr(inner, setter)(lib.address(fn))
    _torch.cuda.memory.change_current_allocator(alloc)
    _keep.append(alloc)
    _lib, _mode = lib, "allocator"
    if on_oom == "advise":
        lib.set_oom_callback(_OwnOom(lib))
    return build_info()


def _advise_numbered(lib: Library, budget, directory: Optional[str], number: int, snapshot_of,
                     device: int, allowed: int, device_free: int, **how) -> str:
    """Advice `number` of an out-of-memory error (watch() and use(on_oom="advise") alike): its
    folder, the snapshot snapshot_of() takes, the device's memory, the advice's text and the
    budget's closing line."""
    folder = _oom.new_directory(budget.folder(directory, number))
    budget.last_folder = folder
    snapshot = snapshot_of()
    try:
        total = int(_torch.cuda.get_device_properties(device).total_memory)
    except Exception:  # noqa: BLE001 - the line then computes the fraction in the shell
        total = None
    return _oom.advise(lib, snapshot, device, int(allowed), int(device_free), total, folder,
                       **how) + budget.note(number)


class _OwnOom:
    """use(on_oom="advise"): called by the library when gpu-basics' allocator runs out of memory,
    before it raises; advises from the allocator's own history, as watch() does (_oom.Budget:
    at each error, not twice for the same request, at most 3 times)."""

    def __init__(self, lib: Library, directory: Optional[str] = None):
        self._lib, self._directory = lib, directory
        self.advised = None  # the text of the last advice printed
        self.budget = _oom.Budget(knob=None)

    def _snapshot(self, device: int) -> dict:
        fd, path = tempfile.mkstemp(prefix="gpu_basics_oom_", suffix=".pickle")
        os.close(fd)
        try:
            self._lib.write_snapshot(device, path)
            with open(path, "rb") as f:
                return pickle.load(f)
        finally:
            os.unlink(path)

    def _advise(self, device: int, allowed: int, device_free: int, number: int) -> str:
        self.advised = _advise_numbered(self._lib, self.budget, self._directory, number,
                                        lambda: self._snapshot(device), device, allowed,
                                        device_free, allocator="gpu-basics'", line_key="gbt")
        return self.advised

    def __call__(self, device, size, allowed, device_free) -> None:
        self.budget.run(lambda n: self._advise(device, allowed, device_free, n), device, size)


def mem_pool(conf: Optional[str] = None, library: str = "auto"):
    """A torch.cuda.MemPool whose memory comes from gpu-basics' allocator, for
    `with torch.cuda.use_mem_pool(pool):`. PyTorch's own allocator stays in charge and caches
    inside the pool (its stats and snapshots keep working); it asks ours for whole segments
    (2 MiB, 20 MiB or the request rounded up to 2 MiB) and gets NULL, not an exception, when ours
    has none, so its own out-of-memory handling runs. PyTorch turns expandable segments off
    inside such pools."""
    global _lib, _mode
    if not hasattr(_torch.cuda, "MemPool"):
        raise GpuBasicsError(f"torch {_torch.__version__} has no torch.cuda.MemPool")
    if _mode == "allocator":
        raise GpuBasicsError("mem_pool() is for a program that keeps PyTorch's allocator; after "
                             "use(), every tensor already comes from gpu-basics' allocator")
    lib = _lib or _load(library)
    if conf is not None:
        lib.configure(conf)
    alloc = _torch.cuda.memory.CUDAPluggableAllocator(lib.path, "gpu_basics_torch_try_alloc",
                                                      "gpu_basics_torch_free")
    _keep.append(alloc)
    _lib, _mode = lib, "mem_pool"
    return _torch.cuda.MemPool(alloc.allocator())


def installed() -> Optional[str]:
    """"allocator" after use(), "mem_pool" after mem_pool(), else None."""
    return _mode


def _need() -> Library:
    if _lib is None:
        raise GpuBasicsError("gpu_basics.torch: call use() (or mem_pool()) first")
    return _lib


def build_info() -> dict:
    """The library in use: its path and file name (library), the torch it was built for (torch,
    torch_dir; None: the plain library) and the one running (torch_running), what out of memory
    raises, the conf, and what the install did about the c10 library (install)."""
    lib = _need()
    return dict(describe(lib), torch_running=_torch.__version__, conf=lib.conf())


_TORCH_NAMES = [  # ours -> PyTorch's memory_stats() name
    ("allocated_bytes", "allocated_bytes"), ("requested_bytes", "requested_bytes"),
    ("reserved_bytes", "reserved_bytes"), ("active_bytes", "active_bytes"),
    ("inactive_split_bytes", "inactive_split_bytes"), ("allocation_count", "allocation"),
    ("segment_count", "segment"), ("active_count", "active"),
    ("inactive_split_count", "inactive_split")]
_ZERO = {"current": 0, "peak": 0, "allocated": 0, "freed": 0}


_POOLS = ("small_pool", "large_pool")  # as PyTorch names them, and as the JSON does


def torch_stats(ours: Optional[dict]) -> "collections.OrderedDict[str, int]":
    """PyTorch's memory_stats() dict from the library's statistics JSON (None: nothing allocated
    yet, all zero). Each counter has its ".all." keys and, as in PyTorch's dict, its
    ".small_pool." and ".large_pool." ones, counted apart by the allocator (small: blocks for
    requests up to 1 MiB, large: the rest, expandable segments included; current, allocated and
    freed of ".all." are their sums, each peak is its pool's own). A library older than the pool
    counters writes no "small_pool" / "large_pool" in its JSON: the pool keys are then left out,
    not made up. gpu-basics' own figures come under "gpu_basics.*"."""
    pools = [("all", ours or {})]
    if ours is None:
        pools += [(pool, {}) for pool in _POOLS]
    else:
        pools += [(pool, ours[pool]) for pool in _POOLS if isinstance(ours.get(pool), dict)]
    ours = ours or {}
    out = {}
    for mine, theirs in _TORCH_NAMES:
        for pool, counters in pools:
            stat = counters.get(mine, _ZERO)
            for k in ("current", "peak", "allocated", "freed"):
                out[f"{theirs}.{pool}.{k}"] = int(stat[k])
    out["num_alloc_retries"] = int(ours.get("alloc_retries", 0))
    out["num_ooms"] = int(ours.get("ooms", 0))
    out["num_sync_all_streams"] = int(ours.get("device_syncs", 0))
    out["num_device_alloc"] = int(ours.get("device_allocations", 0))
    out["num_device_free"] = int(ours.get("device_frees", 0))
    split = ours.get("max_split_size_bytes")
    out["max_split_size"] = -1 if split is None else int(split)
    for k in ("cached_free_bytes", "largest_free_block_bytes", "fragmentation", "device_call_ns",
              "pages_retired", "pages_reclaimed", "cache_claims", "cache_claim_ns"):
        out[f"gpu_basics.{k}"] = ours.get(k, 0)
    return collections.OrderedDict(sorted(out.items()))


def memory_stats(device=None) -> "collections.OrderedDict[str, int]":
    """torch.cuda.memory_stats() for gpu-basics' allocator, with PyTorch's key names."""
    return torch_stats(_need().stats_json(_device(device)))


def memory_allocated(device=None) -> int:
    return memory_stats(device)["allocated_bytes.all.current"]


def max_memory_allocated(device=None) -> int:
    return memory_stats(device)["allocated_bytes.all.peak"]


def memory_reserved(device=None) -> int:
    return memory_stats(device)["reserved_bytes.all.current"]


def max_memory_reserved(device=None) -> int:
    return memory_stats(device)["reserved_bytes.all.peak"]


def reset_peak_memory_stats(device=None) -> None:
    _need().reset_peak(_device(device))


def empty_cache() -> None:
    """Returns the allocator's free cached memory to CUDA (torch.cuda.empty_cache() does the same
    once use() installed it)."""
    _need().empty_cache()


def record_memory_history(enabled: Optional[str] = "all", context=None, stacks=None,
                          max_entries: int = sys.maxsize, device=None) -> None:
    """torch.cuda.memory._record_memory_history(): keep the allocator's last max_entries events
    (enabled=None stops and drops them). context and stacks are accepted for compatibility: the
    allocator records no Python frames."""
    del context, stacks
    n = 0 if enabled in (None, False) else max(0, min(int(max_entries), 2**62))
    _need().record_history(_device(device), n)


def memory_snapshot(device=None) -> dict:
    """The dict torch.cuda.memory._snapshot() returns (segments, device_traces,
    allocator_settings), for torch.cuda._memory_viz and pytorch.org/memory_viz."""
    fd, path = tempfile.mkstemp(prefix="gpu_basics_snapshot_", suffix=".pickle")
    os.close(fd)
    try:
        _need().write_snapshot(_device(device), path)
        with open(path, "rb") as f:
            return pickle.load(f)
    finally:
        os.unlink(path)


def dump_snapshot(path: str, device=None) -> None:
    """torch.cuda.memory._dump_snapshot(): the snapshot pickled to `path`."""
    _need().write_snapshot(_device(device), os.path.abspath(path))


def _format_size(n: int) -> str:  # PyTorch's _format_size
    for unit in ("B  ", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 768 * 1024 or unit == "TiB":
            return f"{n:6d} {unit}"
        n //= 1024
    return f"{n:6d} PiB"


def _format_count(n: int) -> str:  # PyTorch's _format_count
    for unit in (" ", "K", "M"):
        if abs(n) < 750 * 1000 or unit == "M":
            return f"{n:7d} {unit} "
        n //= 1000
    return f"{n:7d} G "


def summary_text(stats: dict, device: int = 0, conf: str = "") -> str:
    """memory_summary()'s table from a memory_stats() dict (PyTorch's layout, one row per metric,
    both pools together: PyTorch's abbreviated summary)."""
    rule = "|" + "=" * 75 + "|"
    line = "|" + "-" * 75 + "|"
    out = [rule, "| " + f"gpu-basics CUDA memory summary, device ID {device}".center(73) + " |",
           line,
           "| " + f"CUDA OOMs: {stats['num_ooms']}".center(34) + " | " +
           f"cudaMalloc retries: {stats['num_alloc_retries']}".center(36) + " |",
           rule,
           "|        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  |",
           line]
    rows = [("allocated_bytes", "Allocated memory", _format_size),
            ("active_bytes", "Active memory", _format_size),
            ("requested_bytes", "Requested memory", _format_size),
            ("reserved_bytes", "GPU reserved memory", _format_size),
            ("inactive_split_bytes", "Non-releasable memory", _format_size),
            ("allocation", "Allocations", _format_count),
            ("active", "Active allocs", _format_count),
            ("segment", "GPU reserved segments", _format_count),
            ("inactive_split", "Non-releasable allocs", _format_count)]
    for key, name, fmt in rows:
        vals = [fmt(stats[f"{key}.all.{k}"]) for k in ("current", "peak", "allocated", "freed")]
        out.append(f"| {name:<21} | " + " | ".join(vals) + " |")
    out.append(line)
    extra = [("Largest free block", _format_size(int(stats["gpu_basics.largest_free_block_bytes"]))),
             ("Fragmentation", f"{100 * float(stats['gpu_basics.fragmentation']):9.1f} %"),
             ("Device maps / frees", f"{stats['num_device_alloc']} / {stats['num_device_free']}"),
             ("Device syncs", str(stats["num_sync_all_streams"])),
             ("Time in device calls", f"{stats['gpu_basics.device_call_ns'] / 1e6:.1f} ms")]
    for name, v in extra:
        out.append(f"| {name:<21} | {v:<49} |")
    out.append(f"| {'Options':<21} | {(conf or '(defaults)')[:49]:<49} |")
    out.append(rule)
    return "\n".join(out) + "\n"


def memory_summary(device=None, abbreviated: bool = False) -> str:
    """torch.cuda.memory_summary() for gpu-basics' allocator."""
    del abbreviated
    d = _device(device)
    return summary_text(memory_stats(d), d, _need().conf())


def _advice_library() -> Library:
    """A library for advise alone (any torch will do: nothing is installed into PyTorch)."""
    if _lib is not None:
        return _lib
    try:
        return _load("plain")  # checked against this torch as any other load
    except LibraryNotFound:
        return _load("auto")


class Watch:
    """What watch() returns: stop() (or leaving its `with` block) turns the history off and the
    advice with it."""

    def __init__(self, lib: Library, directory: Optional[str], fit: Optional[int],
                 max_advice: int = _oom.MOST_ADVICE):
        self._lib, self._directory, self._fit = lib, directory, fit
        self.active = True
        self.advised = None  # the text of the last advice printed
        self.budget = _oom.Budget(max_advice)  # each out-of-memory error, within bounds

    def _advise(self, device: int, allowed: int, device_free: int, number: int) -> str:
        self.advised = _advise_numbered(self._lib, self.budget, self._directory, number,
                                        _torch.cuda.memory._snapshot, device, allowed,
                                        device_free, fit=self._fit)
        return self.advised

    def _observer(self, device, alloc, device_allocated, device_free) -> None:
        # PyTorch calls it as (device, alloc_size, allowed, device_free), allowed being the
        # memory fraction's limit where one is set, else the device's memory, after recording
        # the failed request in the trace and with its allocator's lock released, on the thread
        # that asked (its Python stack is the request's).
        if not self.active:
            return
        self.budget.run(lambda n: self._advise(device, device_allocated, device_free, n),
                        device, alloc)

    @property
    def advice_count(self) -> int:
        """How many out-of-memory errors were advised."""
        return self.budget.given

    def stop(self) -> None:
        """Stops recording the history (PyTorch's observer stays attached, doing nothing:
        PyTorch has no call to detach one)."""
        if self.active:
            self.active = False
            _torch.cuda.memory._record_memory_history(enabled=None)

    def __enter__(self) -> "Watch":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def watch(max_entries: int = 100_000, directory: Optional[str] = None, fit=None,
          max_advice: int = _oom.MOST_ADVICE) -> Watch:
    """Advice at the moment the job runs out of memory, with PyTorch's own allocator.

    Records PyTorch's memory history (_record_memory_history(enabled="all", context="all",
    stacks="python", max_entries=max_entries): the last max_entries events) and attaches an
    out-of-memory observer. At a torch.OutOfMemoryError it takes the snapshot, replays it
    as `gpu-basics advise --fit LIMIT` does, in this process (LIMIT: the memory the job had, the
    memory fraction's where one is set; or `fit`, a size such as "24GiB"), and prints on stderr,
    beside PyTorch's message, which policy would have fitted, the line to apply and the Python
    frames of the failing request; the snapshot (snapshot.pickle.gz) and the advice (advice.txt,
    advice.json) go into `directory` (default: a new gpu_basics_oom_YYYYmmdd-HHMMSS folder in the
    current directory; `directory`-2, -3... for later ones). Every error is advised, since
    PyTorch and user code catch some and go on (the one that ends the job may come later), except
    a request identical to one advised already (same device, size and Python stack) and any after
    `max_advice` advices (each takes seconds): those print one line. Recording history costs
    time and memory. Returns a handle whose stop() ends it, usable as a context manager."""
    if _mode == "allocator":
        raise GpuBasicsError("watch() is for PyTorch's own allocator; after use(), pass "
                             "use(on_oom=\"advise\") instead")
    limit = _oom.parse_size(fit)
    _oom.Budget(max_advice)  # a bad max_advice is an error here, not at the error
    if not isinstance(max_entries, int) or isinstance(max_entries, bool) or max_entries <= 0:
        raise ValueError(f"watch(): max_entries must be a positive int, got {max_entries!r}")
    attach = getattr(_torch._C, "_cuda_attach_out_of_memory_observer", None)
    if attach is None or not hasattr(_torch.cuda.memory, "_record_memory_history"):
        raise GpuBasicsError(f"watch(): torch {_torch.__version__} has no out-of-memory observer "
                             "or memory history (torch._C._cuda_attach_out_of_memory_observer, "
                             "torch.cuda.memory._record_memory_history)")
    global _watching, _observer_attached
    lib = _advice_library()
    handle = Watch(lib, directory, limit, max_advice)
    if _watching is not None:
        _watching.stop()  # one watch at a time: the newest advises
    _torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="python",
                                              max_entries=max_entries)
    _watching = handle
    if not _observer_attached:  # PyTorch cannot detach one: a single observer for every watch
        attach(_observe)
        _observer_attached = True
    return handle


_watching: Optional[Watch] = None
_observer_attached = False


def _observe(device, alloc, allowed, device_free) -> None:
    handle = _watching
    if handle is not None:
        handle._observer(device, alloc, allowed, device_free)
