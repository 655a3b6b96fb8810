"""The C ABI of libgpu_basics_torch_alloc*.so (include/gpu_basics/torch_alloc.h) through ctypes.

Two libraries export it: `libgpu_basics_torch_alloc_c10.so`, built against one PyTorch (out of
memory raises torch.OutOfMemoryError), and `libgpu_basics_torch_alloc.so`, built without PyTorch
(out of memory raises RuntimeError from a std::bad_alloc). They are looked for, in order:

1. the path in GPU_BASICS_TORCH_ALLOC_LIB (either library);
2. the package's own `_lib/` folder (bundled by `pip install ./python` from a build tree);
3. a build tree of the repository the package is imported from (`build/*/src/torch_alloc/`).
"""
from __future__ import annotations

import ctypes
import glob
import json
import os
from typing import Optional

ABI_VERSION = 4
PLAIN = "libgpu_basics_torch_alloc.so"
C10 = "libgpu_basics_torch_alloc_c10.so"
ENV_LIB = "GPU_BASICS_TORCH_ALLOC_LIB"

OK, EINVAL, ERUNTIME, EIO = 0, -1, -2, -4


class GpuBasicsError(RuntimeError):
    """A failure of the allocator library, with its message."""


class LibraryNotFound(GpuBasicsError, FileNotFoundError):
    """No libgpu_basics_torch_alloc*.so where the package looks."""


class LibraryMismatch(GpuBasicsError):
    """The _c10 library was built for another PyTorch than the one running."""


def printable(text: str) -> str:
    """text with control characters escaped as Python writes them (\\x1b, \\n, \\x00), so that a
    message is one line and carries no terminal escape."""
    out = []
    for ch in text:
        if ord(ch) < 32 or 127 <= ord(ch) < 160:
            out.append(repr(ch)[1:-1])
        else:
            out.append(ch)
    return "".join(out)


def regular_file(path: str, what: str) -> str:
    """path, or LibraryNotFound saying whether it is missing or not a regular file (a device, a
    directory)."""
    if not os.path.exists(path):
        raise LibraryNotFound(f"{printable(what)}: no such file")
    if not os.path.isfile(path):
        raise LibraryNotFound(f"{printable(what)}: not a regular file")
    return path


def conf_bytes(conf: Optional[str], allow_none: bool = False) -> bytes:
    """A conf string for the C ABI: a str without NUL (the library would stop reading there)."""
    if conf is None and allow_none:
        return b""
    if not isinstance(conf, str):
        raise TypeError(f"allocator conf: expected a str, got {type(conf).__name__}")
    nul = conf.find("\0")
    if nul >= 0:
        raise ValueError(f"allocator conf: a NUL character (\\x00) at offset {nul} of "
                         f"'{printable(conf)}': a conf string cannot hold one")
    return conf.encode()


def _here() -> str:
    return os.path.dirname(os.path.abspath(__file__))


def candidates(name: str) -> list:
    """Where `name` is looked for (after GPU_BASICS_TORCH_ALLOC_LIB), best first."""
    out = [os.path.join(_here(), "_lib", name)]
    repo = os.path.dirname(os.path.dirname(_here()))  # python/gpu_basics -> repository
    for preset in ("default", "*"):
        out += sorted(glob.glob(os.path.join(repo, "build", preset, "src", "torch_alloc", name)))
    seen, unique = set(), []
    for p in out:
        if p not in seen:
            seen.add(p)
            unique.append(p)
    return unique


def find_library(kind: str = "any") -> str:
    """The path of the library to load: kind "c10", "plain" or "any" (the _c10 one first).

    Raises LibraryNotFound naming every place looked at."""
    env = os.environ.get(ENV_LIB)
    if env:
        return os.path.realpath(regular_file(env, f"{ENV_LIB}={env}"))
    names = {"c10": [C10], "plain": [PLAIN], "any": [C10, PLAIN]}.get(kind)
    if names is None:
        raise ValueError(f"library kind {kind!r}: expected 'c10', 'plain' or 'any'")
    looked = []
    for name in names:
        for p in candidates(name):
            looked.append(p)
            if os.path.isfile(p):
                return os.path.realpath(p)
    raise LibraryNotFound(
        f"no {' or '.join(names)} found (looked in: {', '.join(looked) or 'nowhere'}); build "
        f"gpu-basics (scripts/build.sh), install the package from that tree, or set {ENV_LIB}")


def sidecar(path: str) -> Optional[dict]:
    """What a _c10 library was built for, read without loading it (the JSON beside it)."""
    base = os.path.basename(os.path.splitext(path)[0])
    side = os.path.join(os.path.dirname(path), base[3:] if base.startswith("lib") else base) + ".json"
    if not os.path.isfile(side):
        return None
    with open(side) as f:
        return json.load(f)


def describe(lib: "Library") -> dict:
    """build_info()'s dict: what the library says it was built for (torch: None for the plain
    library), which file was loaded (path, library), the torch folder a _c10 library was built
    against (torch_dir), and, in an installed package, what the install did about the _c10
    library (install)."""
    info = dict(lib.build, path=lib.path, library=os.path.basename(lib.path))
    built = sidecar(lib.path) if lib.is_c10 else None
    if built is not None:
        info["torch_dir"] = built.get("torch_dir")
    try:
        from ._version import install_note
        info["install"] = install_note
    except ImportError:  # the source tree, or a package installed before the note
        pass
    return info


class Stats(ctypes.Structure):
    """gpu_basics_torch_stats_t."""
    _fields_ = [(name, ctypes.c_int64) for name in (
        "allocated_current", "allocated_peak", "requested_current", "requested_peak",
        "reserved_current", "reserved_peak", "active_current", "active_peak", "segments_current",
        "segments_peak", "allocations_current", "device_allocations", "device_frees",
        "alloc_retries", "ooms", "cached_free_bytes", "largest_free_block")] + [
        ("fragmentation", ctypes.c_double)]


# gpu_basics_torch_oom_fn: (device, size, allowed, device_free).
OOM_FN = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_size_t)


class Library:
    """One loaded libgpu_basics_torch_alloc*.so."""

    def __init__(self, path: Optional[str] = None):
        self.path = os.path.realpath(regular_file(path, path)) if path else find_library("any")
        try:
            self.lib = ctypes.CDLL(self.path)
        except OSError as e:
            raise GpuBasicsError(f"{self.path}: cannot be loaded: {e}") from None
        L = self.lib
        try:
            L.gpu_basics_torch_abi_version.restype = ctypes.c_int
        except AttributeError:
            raise GpuBasicsError(f"{self.path}: not a gpu-basics allocator library") from None
        abi = L.gpu_basics_torch_abi_version()
        if abi != ABI_VERSION:
            raise GpuBasicsError(f"{self.path}: C ABI version {abi}, this package reads "
                                 f"{ABI_VERSION}: install the package from the same tree")
        sig = {
            "gpu_basics_torch_try_alloc": (ctypes.c_void_p, [ctypes.c_size_t, ctypes.c_int,
                                                             ctypes.c_void_p]),
            "gpu_basics_torch_free": (None, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                             ctypes.c_void_p]),
            "gpu_basics_torch_empty_cache": (None, []),
            "gpu_basics_torch_stats": (ctypes.c_int, [ctypes.c_int, ctypes.POINTER(Stats)]),
            "gpu_basics_torch_stats_json": (ctypes.c_int, [ctypes.c_int, ctypes.c_char_p,
                                                           ctypes.c_size_t]),
            "gpu_basics_torch_reset_peak": (ctypes.c_int, [ctypes.c_int]),
            "gpu_basics_torch_write_snapshot": (ctypes.c_int, [ctypes.c_int, ctypes.c_char_p]),
            "gpu_basics_torch_conf": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_size_t]),
            "gpu_basics_torch_check_conf": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_char_p,
                                                           ctypes.c_size_t]),
            "gpu_basics_torch_conf_keys": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_size_t]),
            "gpu_basics_torch_configure": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_size_t]),
            "gpu_basics_torch_record_history": (ctypes.c_int, [ctypes.c_int, ctypes.c_size_t]),
            "gpu_basics_torch_last_error": (ctypes.c_char_p, []),
            "gpu_basics_torch_build_info": (ctypes.c_char_p, []),
            "gpu_basics_torch_set_memory_fraction": (None, [ctypes.c_double, ctypes.c_int]),
            "gpu_basics_torch_advise": (ctypes.c_int, [
                ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p,
                ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_void_p)]),
            "gpu_basics_torch_free_string": (None, [ctypes.c_void_p]),
            "gpu_basics_torch_set_oom_callback": (ctypes.c_int, [OOM_FN]),
        }
        for name, (res, args) in sig.items():
            f = getattr(L, name)
            f.restype, f.argtypes = res, args
        self.build = json.loads(L.gpu_basics_torch_build_info().decode())

    @property
    def is_c10(self) -> bool:
        return self.build.get("torch") is not None

    def address(self, name: str) -> int:
        """The address of an exported function (for PyTorch's set_*_fn hooks)."""
        return ctypes.cast(getattr(self.lib, name), ctypes.c_void_p).value

    def last_error(self) -> str:
        return printable((self.lib.gpu_basics_torch_last_error() or b"").decode(errors="replace"))

    def _check(self, rc: int, what: str) -> int:
        if rc == EINVAL:
            raise ValueError(self.last_error() or printable(what))
        if rc < 0:
            raise GpuBasicsError(f"{printable(what)}: {self.last_error()}")
        return rc

    def _text(self, fn, *args) -> str:
        size = 4096
        while True:
            buf = ctypes.create_string_buffer(size)
            n = self._check(fn(*args, buf, size), fn.__name__)
            if n < size:
                return buf.value.decode()
            size = n + 1

    def conf(self) -> str:
        return self._text(self.lib.gpu_basics_torch_conf)

    def check_conf(self, conf: str) -> str:
        return self._text(self.lib.gpu_basics_torch_check_conf, conf_bytes(conf))

    def conf_keys(self) -> list:
        """Every key a conf string may hold: dicts of name, module, accepts, example (a valid
        value other than the default) and ignored (PyTorch's key, without effect here)."""
        return json.loads(self._text(self.lib.gpu_basics_torch_conf_keys))

    def configure(self, conf: Optional[str], history: int = 0) -> None:
        self._check(self.lib.gpu_basics_torch_configure(conf_bytes(conf, allow_none=True), history),
                    "configure")

    def stats_json(self, device: int) -> Optional[dict]:
        return json.loads(self._text(self.lib.gpu_basics_torch_stats_json, device))

    def reset_peak(self, device: int) -> None:
        self._check(self.lib.gpu_basics_torch_reset_peak(device), "reset_peak")

    def record_history(self, device: int, max_events: int) -> None:
        self._check(self.lib.gpu_basics_torch_record_history(device, max_events),
                    "record_history")

    def write_snapshot(self, device: int, path: str) -> None:
        rc = self.lib.gpu_basics_torch_write_snapshot(device, os.fsencode(path))
        self._check(rc, f"write_snapshot({path})")

    def empty_cache(self) -> None:
        self.lib.gpu_basics_torch_empty_cache()

    def try_alloc(self, size: int, device: int = 0, stream: int = 0) -> int:
        """Device memory from the allocator (for tests and C-style use); raises on failure."""
        p = self.lib.gpu_basics_torch_try_alloc(size, device, stream)
        if not p and size:
            raise GpuBasicsError(self.last_error())
        return p or 0

    def free(self, ptr: int, device: int = 0) -> None:
        self.lib.gpu_basics_torch_free(ptr, 0, device, None)

    def advise(self, snapshot: bytes, limit_bytes: Optional[int] = None,
               device_memory_bytes: Optional[int] = None, **options) -> "tuple[dict, str]":
        """`gpu-basics advise` in this process on a snapshot's pickle bytes: (the advice as
        `advise --json` writes it, the tables it prints). limit_bytes: --fit;
        device_memory_bytes: --device-memory; options: the rest of gpu_basics_torch_advise()'s
        (device, replay_failed_request, threads, name). Raises ValueError for bytes that are
        not a snapshot with history, or bad options."""
        if not isinstance(snapshot, (bytes, bytearray, memoryview)):
            raise TypeError(f"advise: expected the snapshot's pickle bytes, got "
                            f"{type(snapshot).__name__}")
        opts = dict(options, limit_bytes=limit_bytes, device_memory_bytes=device_memory_bytes)
        data = bytes(snapshot)
        out_json, out_text = ctypes.c_void_p(), ctypes.c_void_p()
        rc = self.lib.gpu_basics_torch_advise(data, len(data), json.dumps(opts).encode(),
                                              ctypes.byref(out_json), ctypes.byref(out_text))
        try:
            self._check(rc, "advise")
            doc = json.loads(ctypes.string_at(out_json.value).decode())
            text = ctypes.string_at(out_text.value).decode(errors="replace")
        finally:
            self.lib.gpu_basics_torch_free_string(out_json.value)
            self.lib.gpu_basics_torch_free_string(out_text.value)
        return doc, text

    def set_oom_callback(self, fn) -> None:
        """fn(device, size, allowed, device_free) is called when an allocation of
        gpu_basics_torch_alloc (PyTorch's) runs out of memory, before it raises; None: none. It
        must not raise (ctypes would print the traceback and go on)."""
        cb = OOM_FN(fn) if fn is not None else OOM_FN()
        # Every callback ever set stays alive: a thread may have read the previous pointer just
        # before it was replaced, and calls it after.
        self.__dict__.setdefault("_oom_callbacks", []).append(cb)
        self._check(self.lib.gpu_basics_torch_set_oom_callback(cb), "set_oom_callback")
