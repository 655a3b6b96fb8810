#!/usr/bin/env python3
"""Train a small decoder-only transformer with gpu-basics' caching allocator as PyTorch's CUDA
allocator (torch.cuda.memory.CUDAPluggableAllocator over libgpu_basics_torch_alloc.so), or with
PyTorch's own, and record losses, step times and memory.

    python examples/torch_pluggable.py --allocator ours --lib build/.../libgpu_basics_torch_alloc.so \
        --deterministic --steps 40 --json ours.json
    python examples/torch_pluggable.py --allocator native --deterministic --steps 40 --json native.json

With --deterministic the two runs must give the same loss at every step (the allocator changes
where tensors live, never what is computed). Our allocator's options come from
GPU_BASICS_ALLOC_CONF (PYTORCH_CUDA_ALLOC_CONF's syntax) and GPU_BASICS_ALLOC_HISTORY; its
statistics are read through ctypes from the same library, since torch.cuda.memory_stats() does
not work with a pluggable allocator.

The JSON: losses (exact, as Python floats), sequence lengths, step times (median without the
first two steps), peak reserved / allocated / requested bytes, allocated and requested bytes at
the start (before the model) and at the end (after deleting model, optimizer and batches, a
garbage collection and clearing cuBLAS's workspaces: they must be back at the start's values),
reserved bytes after torch.cuda.empty_cache().
"""
import argparse
import ctypes
import gc
import json
import os
import statistics
import sys
import time

STATS_FIELDS = [
    "allocated_current", "allocated_peak", "requested_current", "requested_peak",
    "reserved_current", "reserved_peak", "active_current", "active_peak", "segments_current",
    "segments_peak", "allocations_current", "device_allocations", "device_frees",
    "alloc_retries", "ooms", "cached_free_bytes", "largest_free_block",
]


class Stats(ctypes.Structure):
    """gpu_basics_torch_stats_t (include/gpu_basics/torch_alloc.h, ABI version 1)."""
    _fields_ = [(name, ctypes.c_int64) for name in STATS_FIELDS] + [("fragmentation", ctypes.c_double)]


class OurLibrary:
    """The C ABI of libgpu_basics_torch_alloc.so through ctypes."""
    ABI_VERSION = 1

    def __init__(self, path: str):
        self.path = os.path.realpath(path)
        self.lib = ctypes.CDLL(self.path)  # the same handle CUDAPluggableAllocator opens
        self.lib.gpu_basics_torch_abi_version.restype = ctypes.c_int
        self.lib.gpu_basics_torch_stats.argtypes = [ctypes.c_int, ctypes.POINTER(Stats)]
        self.lib.gpu_basics_torch_stats.restype = ctypes.c_int
        self.lib.gpu_basics_torch_reset_peak.argtypes = [ctypes.c_int]
        self.lib.gpu_basics_torch_write_snapshot.argtypes = [ctypes.c_int, ctypes.c_char_p]
        self.lib.gpu_basics_torch_write_snapshot.restype = ctypes.c_int
        self.lib.gpu_basics_torch_conf.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        self.lib.gpu_basics_torch_conf.restype = ctypes.c_int
        self.lib.gpu_basics_torch_last_error.restype = ctypes.c_char_p
        abi = self.lib.gpu_basics_torch_abi_version()
        if abi != self.ABI_VERSION:
            raise RuntimeError(f"{self.path}: ABI version {abi}, this script reads {self.ABI_VERSION}")

    def fn(self, name: str) -> int:
        return ctypes.cast(getattr(self.lib, name), ctypes.c_void_p).value

    def last_error(self) -> str:
        return (self.lib.gpu_basics_torch_last_error() or b"").decode(errors="replace")

    def stats(self, device: int = 0) -> dict:
        s = Stats()
        rc = self.lib.gpu_basics_torch_stats(device, ctypes.byref(s))
        if rc != 0:
            raise RuntimeError(f"gpu_basics_torch_stats: {rc}: {self.last_error()}")
        d = {name: getattr(s, name) for name in STATS_FIELDS}
        d["fragmentation"] = s.fragmentation
        return d

    def conf(self) -> str:
        buf = ctypes.create_string_buffer(1024)
        rc = self.lib.gpu_basics_torch_conf(buf, len(buf))
        if rc < 0:
            raise RuntimeError(f"gpu_basics_torch_conf: {self.last_error()}")
        return buf.value.decode()

    def write_snapshot(self, path: str, device: int = 0):
        rc = self.lib.gpu_basics_torch_write_snapshot(device, path.encode())
        return rc, (self.last_error() if rc != 0 else "")


def install_ours(torch, lib: OurLibrary) -> list:
    """Makes our library PyTorch's CUDA allocator, with every optional hook this PyTorch offers.
    Must run before anything initialises CUDA in PyTorch."""
    alloc = torch.cuda.memory.CUDAPluggableAllocator(
        lib.path, "gpu_basics_torch_alloc", "gpu_basics_torch_free")
    hooks = []
    inner = alloc.allocator()
    for setter, fn in (("set_record_stream_fn", "gpu_basics_torch_record_stream"),
                       ("set_reset_fn", "gpu_basics_torch_empty_cache"),
                       ("set_memory_fraction_fn", "gpu_basics_torch_set_memory_fraction"),
                       ("set_base_alloc_fn", "gpu_basics_torch_base_alloc"),
                       ("set_init_fn", "gpu_basics_torch_init")):
        if hasattr(inner, setter):
            getattr(inner, setter)(lib.fn(fn))
            hooks.append(setter)
    torch.cuda.memory.change_current_allocator(alloc)
    return hooks


def main() -> int:
    if "--deterministic" in sys.argv[1:]:  # before torch is imported, so before CUDA and cuBLAS
        os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--allocator", choices=["ours", "native"], required=True)
    p.add_argument("--lib", help="libgpu_basics_torch_alloc.so (with --allocator ours)")
    p.add_argument("--deterministic", action="store_true",
                   help="deterministic algorithms, CUBLAS_WORKSPACE_CONFIG=:4096:8, fixed seeds")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--snapshot", help="(ours) write our allocator's memory snapshot here at the "
                   "end of training, model still alive")
    import tiny_transformer as tt  # imports torch (CUDA stays uninitialised until used)
    tt.add_model_args(p)
    args = p.parse_args()
    if args.allocator == "ours" and not args.lib:
        p.error("--allocator ours needs --lib PATH")

    import torch

    lib = OurLibrary(args.lib) if args.allocator == "ours" else None
    hooks = install_ours(torch, lib) if lib else []
    if not torch.cuda.is_available():
        print("torch_pluggable: no CUDA device visible", file=sys.stderr)
        return 3
    if args.deterministic:
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.benchmark = False
    device = torch.device("cuda", 0)

    def memory() -> dict:
        if lib:
            s = lib.stats(0)
            return {"allocated": s["allocated_current"], "requested": s["requested_current"],
                    "reserved": s["reserved_current"]}
        s = torch.cuda.memory_stats(device)
        return {"allocated": s.get("allocated_bytes.all.current", 0),
                "requested": s.get("requested_bytes.all.current", 0),
                "reserved": s.get("reserved_bytes.all.current", 0)}

    torch.cuda.init()
    start = memory()
    model, opt = tt.build(args, device)
    losses, seq_lens, times = [], [], []
    for step, t, x, y in tt.batches(args):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        x, y = x.to(device), y.to(device)
        loss = tt.train_step(model, opt, x, y)
        value = loss.item()  # synchronises
        times.append(time.perf_counter() - t0)
        losses.append(value)
        seq_lens.append(t)
        if not (value == value):  # NaN
            print(f"torch_pluggable: loss is NaN at step {step}", file=sys.stderr)
            return 1

    if lib:
        s = lib.stats(0)
        peaks = {"reserved": s["reserved_peak"], "allocated": s["allocated_peak"],
                 "requested": s["requested_peak"]}
        end_stats_live = s
    else:
        s = torch.cuda.memory_stats(device)
        peaks = {"reserved": torch.cuda.max_memory_reserved(device),
                 "allocated": torch.cuda.max_memory_allocated(device),
                 "requested": s.get("requested_bytes.all.peak", 0)}
        end_stats_live = {k: v for k, v in s.items() if k.endswith(".all.current")
                          or k.endswith(".all.peak") or k.startswith("num_")}
    snapshot = None
    if args.snapshot:
        if not lib:
            p.error("--snapshot is for --allocator ours (record_snapshot.py covers PyTorch's)")
        rc, why = lib.write_snapshot(os.path.abspath(args.snapshot))
        snapshot = {"path": os.path.abspath(args.snapshot), "rc": rc, "error": why}

    del model, opt, x, y, loss
    gc.collect()
    torch.cuda.synchronize()
    if hasattr(torch._C, "_cuda_clearCublasWorkspaces"):
        torch._C._cuda_clearCublasWorkspaces()
    torch.cuda.synchronize()
    end = memory()
    torch.cuda.empty_cache()
    after_empty = memory()

    warm = times[2:] if len(times) > 4 else times
    result = {
        "allocator": args.allocator,
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "device_name": torch.cuda.get_device_name(device),
        "deterministic": args.deterministic,
        "config": tt.model_config(args),
        "library": lib.path if lib else None,
        "conf": lib.conf() if lib else os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
        "hooks": hooks,
        "losses": losses,
        "seq_lens": seq_lens,
        "step_times_s": times,
        "step_time_median_s": statistics.median(warm),
        "peak_reserved_bytes": peaks["reserved"],
        "peak_allocated_bytes": peaks["allocated"],
        "peak_requested_bytes": peaks["requested"],
        "allocated_start_bytes": start["allocated"],
        "requested_start_bytes": start["requested"],
        "allocated_end_bytes": end["allocated"],
        "requested_end_bytes": end["requested"],
        "reserved_end_bytes": end["reserved"],
        "reserved_after_empty_cache_bytes": after_empty["reserved"],
        "stats_before_delete": end_stats_live,
        "snapshot": snapshot,
    }
    mib = 1 << 20
    print(f"{args.allocator}: {len(losses)} steps, last loss {losses[-1]:.6f}, median step "
          f"{result['step_time_median_s'] * 1e3:.2f} ms, peak reserved "
          f"{peaks['reserved'] / mib:.1f} MiB, peak allocated {peaks['allocated'] / mib:.1f} MiB, "
          f"allocated start/end {start['allocated']}/{end['allocated']} B, reserved after "
          f"empty_cache {after_empty['reserved'] / mib:.1f} MiB")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
