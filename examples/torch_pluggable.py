#!/usr/bin/env python3
"""Train a small decoder-only transformer with gpu-basics' caching allocator as PyTorch's CUDA
allocator (the gpu_basics package: `gbt.use()`), or with PyTorch's own, and record losses, step
times and memory.

    PYTHONPATH=python python examples/torch_pluggable.py --allocator ours \
        --conf expandable_segments:True --deterministic --steps 40 --json ours.json
    python examples/torch_pluggable.py --allocator native --deterministic --steps 40 --json native.json

With --deterministic the two runs must give the same loss at every step (the allocator changes
where tensors live, never what is computed). Our allocator's options come from --conf (else
GPU_BASICS_ALLOC_CONF), in PYTORCH_CUDA_ALLOC_CONF's syntax; PyTorch's from
PYTORCH_CUDA_ALLOC_CONF. --lib picks the allocator library (default: the one the package finds:
GPU_BASICS_TORCH_ALLOC_LIB, the installed package's, or this tree's build). Both allocators'
statistics are read through the same names (gbt.memory_stats() mirrors torch.cuda.memory_stats()).

The JSON: losses (exact, as Python floats), sequence lengths, step times (median without the
first two steps), peak reserved / allocated / requested bytes, allocated and requested bytes at
the start (before the model) and at the end (after deleting model, optimizer and batches, a
garbage collection and clearing cuBLAS's workspaces: they must be back at the start's values),
reserved bytes after torch.cuda.empty_cache(), and the allocator's device calls (maps, frees,
synchronisations).
"""
import argparse
import gc
import json
import os
import statistics
import sys
import time

def main() -> int:
    if "--deterministic" in sys.argv[1:]:  # before torch is imported, so before CUDA and cuBLAS
        os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    sys.path.insert(1, os.path.join(os.path.dirname(here), "python"))  # the package, in the tree
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--allocator", choices=["ours", "native"], required=True)
    p.add_argument("--lib", default="auto",
                   help="(ours) allocator library: auto, c10, plain, or a path")
    p.add_argument("--conf", help="(ours) allocator options, PYTORCH_CUDA_ALLOC_CONF's syntax")
    p.add_argument("--history", type=int, default=0, help="(ours) allocator events kept")
    p.add_argument("--deterministic", action="store_true",
                   help="deterministic algorithms, CUBLAS_WORKSPACE_CONFIG=:4096:8, fixed seeds")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--snapshot", help="(ours) write our allocator's memory snapshot here at the "
                   "end of training, model still alive")
    import tiny_transformer as tt  # imports torch (CUDA stays uninitialised until used)
    tt.add_model_args(p)
    args = p.parse_args()

    import torch

    if not torch.cuda.is_available():
        print("torch_pluggable: no CUDA device visible", file=sys.stderr)
        return 3
    ours = args.allocator == "ours"
    if ours:
        import gpu_basics.torch as gbt
        info = gbt.use(conf=args.conf, history=args.history, library=args.lib)
        stats_of = gbt.memory_stats
    else:
        info = None
        stats_of = torch.cuda.memory_stats
    if args.deterministic:
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.benchmark = False
    device = torch.device("cuda", 0)

    def memory() -> dict:
        s = stats_of(device)
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
        loss = tt.train_step(model, opt, x, y, args.autocast)
        value = loss.item()  # synchronises
        times.append(time.perf_counter() - t0)
        losses.append(value)
        seq_lens.append(t)
        if not (value == value):  # NaN
            print(f"torch_pluggable: loss is NaN at step {step}", file=sys.stderr)
            return 1

    s = stats_of(device)
    peaks = {"reserved": s["reserved_bytes.all.peak"], "allocated": s["allocated_bytes.all.peak"],
             "requested": s.get("requested_bytes.all.peak", 0)}
    end_stats_live = {k: v for k, v in s.items() if k.endswith(".all.current")
                      or k.endswith(".all.peak") or k.startswith("num_")
                      or k.startswith("gpu_basics.")}
    snapshot = None
    if args.snapshot:
        if not ours:
            p.error("--snapshot is for --allocator ours (record_snapshot.py covers PyTorch's)")
        try:
            gbt.dump_snapshot(args.snapshot)
            snapshot = {"path": os.path.abspath(args.snapshot), "rc": 0, "error": ""}
        except Exception as e:  # reported in the JSON, checked by the tests
            snapshot = {"path": os.path.abspath(args.snapshot), "rc": -1, "error": str(e)}

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
        "library": info["path"] if info else None,
        "library_build": info,
        "conf": gbt.build_info()["conf"] if ours else os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
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
