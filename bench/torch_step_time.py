#!/usr/bin/env python3
"""Step time and peak reserved of a training loop with PyTorch's allocator and with gpu-basics',
with and without expandable segments, in interleaved runs (one process each, the order rotated
every repetition), so that a shared machine's drift falls on every allocator alike.

    bench/torch_step_time.py --reps 3 [--lib c10] [--json OUT] [-- MODEL ARGS...]

The loop is examples/torch_pluggable.py (an 8-layer decoder-only transformer under bf16 autocast
by default, a random sequence length each step). For our allocator it also reports what the
expandable pages cost: device maps and unmaps (num_device_alloc / num_device_free), device
synchronisations, host time inside those calls, and pages retired and taken back (deferred
release); and how often the lock holder claimed other threads' caches (a heavy fence each: the
autograd thread's frees of what the main thread's fast path handed out, shared-cache sweeps, and
the stats call itself), with its time. A library built before the count existed shows 0. The medians are over the repetitions' median step times.

    bench/torch_step_time.py --watch-overhead [--reps 6] [--json OUT]

measures instead what gpu_basics.torch.watch()'s history costs the same transformer's step, in
one process with PyTorch's allocator (bench/torch_watch_overhead.py).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
MIB = 1 << 20
MODEL = ["--layers", "8", "--d-model", "1024", "--heads", "16", "--vocab", "32000", "--batch",
         "16", "--min-seq", "128", "--max-seq", "1024", "--autocast", "bf16", "--steps", "60"]
RUNS = [  # name, allocator, PYTORCH_CUDA_ALLOC_CONF, our conf
    ("pytorch", "native", "", None),
    ("pytorch_expandable", "native", "expandable_segments:True", None),
    ("ours", "ours", "", ""),
    ("ours_expandable", "ours", "", "expandable_segments:True"),  # page_release:keep
    ("ours_expandable_eager", "ours", "", "expandable_segments:True,page_release:eager"),
    ("ours_expandable_deferred", "ours", "", "expandable_segments:True,page_release:deferred"),
]


def main() -> int:
    if "--watch-overhead" in sys.argv[1:]:
        sys.path.insert(0, HERE)
        import torch_watch_overhead
        return torch_watch_overhead.main([a for a in sys.argv[1:] if a != "--watch-overhead"])
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--lib", default="auto")
    p.add_argument("--json")
    p.add_argument("--work", default="step_time_work")
    p.add_argument("--only", action="append", help="run names to keep (default: all)")
    p.add_argument("--also-lib", action="append", default=[], metavar="NAME=PATH",
                   help="add a run of our allocator (default options) from another library, "
                        "named ours@NAME: another build, to compare in the same interleaving")
    p.add_argument("model", nargs="*", help="model arguments for torch_pluggable.py")
    args = p.parse_args()
    os.makedirs(args.work, exist_ok=True)
    runs = [r for r in RUNS if not args.only or r[0] in args.only]
    libs = {}
    for spec in args.also_lib:
        name, sep, path = spec.partition("=")
        if not sep or not name or not os.path.exists(path):
            p.error(f"--also-lib {spec!r}: expected NAME=PATH of an existing library")
        libs[f"ours@{name}"] = path
        runs.append((f"ours@{name}", "ours", "", ""))
    model = args.model or MODEL
    results = {r[0]: [] for r in runs}
    for rep in range(args.reps):
        order = runs[rep % len(runs):] + runs[:rep % len(runs)]
        for name, allocator, torch_conf, conf in order:
            out = os.path.join(args.work, f"{name}_{rep}.json")
            cmd = [sys.executable, os.path.join(REPO, "examples", "torch_pluggable.py"),
                   "--allocator", allocator, "--json", out] + model
            if allocator == "ours":
                cmd += ["--lib", libs.get(name, args.lib), "--conf", conf]
            env = {k: v for k, v in os.environ.items()
                   if k not in ("PYTORCH_CUDA_ALLOC_CONF", "GPU_BASICS_ALLOC_CONF")}
            if torch_conf:
                env["PYTORCH_CUDA_ALLOC_CONF"] = torch_conf
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
            if proc.returncode != 0:
                print(f"{name} rep {rep}: failed (rc {proc.returncode}): {proc.stderr[-1500:]}")
                return 1
            with open(out) as f:
                r = json.load(f)
            results[name].append(r)
            s = r["stats_before_delete"]
            print(f"rep {rep} {name:<22} median step {r['step_time_median_s'] * 1e3:7.2f} ms, "
                  f"peak reserved {r['peak_reserved_bytes'] / MIB:8.0f} MiB, maps/frees "
                  f"{s.get('num_device_alloc', '-')}/{s.get('num_device_free', '-')}, syncs "
                  f"{s.get('num_sync_all_streams', '-')}, device calls "
                  f"{s.get('gpu_basics.device_call_ns', 0) / 1e6:.1f} ms", flush=True)
    print()
    base = {k: statistics.median(x["step_time_median_s"] for x in results[k])
            for k in results if results[k]}
    def paired(name, peer):  # each repetition's ratio to the peer's run of the same repetition
        return [a["step_time_median_s"] / b["step_time_median_s"]
                for a, b in zip(results[name], results.get(peer, []))]
    print(f"| run | median step, ms (each rep) | x PyTorch same mode: median of paired ratios (each) | peak reserved, MiB "
          f"| maps / unmaps | syncs | ms in device calls | pages retired / taken back "
          f"| cache claims (ms) |")
    print("|---|---|---|---|---|---|---|---|---|")
    summary = {}
    for name, rs in results.items():
        med = base[name]
        peer = base.get("pytorch_expandable" if "expandable" in name else "pytorch", med)
        peaks = [x["peak_reserved_bytes"] for x in rs]
        s = [x["stats_before_delete"] for x in rs]

        def col(key, scale=1.0, fmt="{:.0f}"):
            vals = [v.get(key) for v in s]
            if any(v is None for v in vals):
                return "-"
            return "/".join(fmt.format(v / scale) for v in vals)
        each = " / ".join(f"{x['step_time_median_s'] * 1e3:.2f}" for x in rs)
        peer_name = "pytorch_expandable" if "expandable" in name else "pytorch"
        ratios = paired(name, peer_name) if peer_name in results else []
        ratio = statistics.median(ratios) if ratios else med / peer
        print(f"| {name} | {med * 1e3:.2f} ({each}) | {ratio:.3f} ({' / '.join(f'{x:.3f}' for x in ratios)}) | "
              f"{'/'.join(f'{v / MIB:.0f}' for v in peaks)} | "
              f"{col('num_device_alloc')} / {col('num_device_free')} | "
              f"{col('num_sync_all_streams')} | {col('gpu_basics.device_call_ns', 1e6, '{:.1f}')} | "
              f"{col('gpu_basics.pages_retired')} / {col('gpu_basics.pages_reclaimed')} | "
              f"{col('gpu_basics.cache_claims')} ({col('gpu_basics.cache_claim_ns', 1e6, '{:.1f}')}) |")
        summary[name] = {"median_step_s": med, "ratio_to_pytorch_same_mode": ratio,
                         "paired_ratios": ratios,
                         "step_medians_s": [x["step_time_median_s"] for x in rs],
                         "peak_reserved_bytes": peaks, "stats": s,
                         "losses_equal_first": rs[0]["losses"] == results[next(iter(results))][0]["losses"]}
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": model, "reps": args.reps, "runs": summary}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
