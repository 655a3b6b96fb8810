#!/usr/bin/env python3
"""The PyTorch bridge's GPU tests (ctest label `gpu`), run with the Python that has PyTorch.

  run_torch_tests.py pluggable --lib LIB --examples DIR --work DIR
      examples/torch_pluggable.py in deterministic mode with PyTorch's allocator, ours (defaults)
      and ours with expandable_segments: fails unless every run finishes, the losses of ours are
      the native ones exactly at every step, and our allocated bytes come back to where they
      started once model and optimizer are gone. Prints step time and peak reserved of each.
  run_torch_tests.py snapshots --lib LIB --examples DIR --work DIR
      examples/record_snapshot.py writes PyTorch's snapshot, and our library writes one of a run
      (gpu_basics_torch_write_snapshot); `python -m torch.cuda._memory_viz` stats, segment_plot and
      trace_plot must read both (segments too where its flamegraph.pl is at hand: it downloads it
      otherwise, and the GPU machine has no network).

Exit 77 (skipped) where PyTorch sees no GPU.
"""
import argparse
import json
import os
import subprocess
import sys
import time

MIB = 1 << 20


def run(cmd, log, env=None, timeout=300):
    """Runs cmd, teeing its output into log; returns (rc, output)."""
    t0 = time.monotonic()
    print("$", " ".join(cmd), flush=True)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       env=env, timeout=timeout)
    with open(log, "w") as f:
        f.write(p.stdout)
    out = p.stdout.strip()
    tail = "\n".join(out.splitlines()[-15:])
    print(f"  -> rc {p.returncode} in {time.monotonic() - t0:.1f} s\n  " + tail.replace("\n", "\n  "),
          flush=True)
    return p.returncode, p.stdout


def env_with(**kv):
    env = dict(os.environ)
    for k, v in kv.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return env


def pluggable(args) -> list:
    failures = []
    script = os.path.join(args.examples, "torch_pluggable.py")
    steps = str(args.steps)
    runs = [("native", [], {}),
            ("ours", ["--lib", args.lib], {"GPU_BASICS_ALLOC_CONF": None}),
            ("ours_expandable", ["--lib", args.lib],
             {"GPU_BASICS_ALLOC_CONF": "expandable_segments:True"})]
    results = {}
    for name, extra, env in runs:
        out = os.path.join(args.work, f"pluggable_{name}.json")
        if os.path.exists(out):
            os.remove(out)
        allocator = "native" if name == "native" else "ours"
        rc, _ = run([sys.executable, script, "--allocator", allocator, "--deterministic",
                     "--steps", steps, "--json", out] + extra,
                    os.path.join(args.work, f"pluggable_{name}.log"),
                    env=env_with(PYTORCH_CUDA_ALLOC_CONF=None, **env))
        if rc != 0 or not os.path.exists(out):
            failures.append(f"{name}: torch_pluggable.py failed (rc {rc}, see "
                            f"{args.work}/pluggable_{name}.log)")
            continue
        with open(out) as f:
            results[name] = json.load(f)

    native = results.get("native")
    for name in ("ours", "ours_expandable"):
        r = results.get(name)
        if not r:
            continue
        if len(r["losses"]) != args.steps:
            failures.append(f"{name}: {len(r['losses'])} losses for {args.steps} steps")
        if native:
            if r["seq_lens"] != native["seq_lens"]:
                failures.append(f"{name}: sequence lengths differ from native's (data not seeded?)")
            diff = [i for i, (a, b) in enumerate(zip(r["losses"], native["losses"])) if a != b]
            if diff:
                i = diff[0]
                failures.append(f"{name}: losses differ from native at {len(diff)} step(s), first "
                                f"step {i}: {r['losses'][i]!r} vs {native['losses'][i]!r}")
        # Back to the baseline once everything is deleted. Where PyTorch itself keeps something
        # (native leaves the same requested bytes), say so rather than blame the allocator.
        left = r["allocated_end_bytes"] - r["allocated_start_bytes"]
        left_req = r["requested_end_bytes"] - r["requested_start_bytes"]
        if left != 0:
            native_left = (native["requested_end_bytes"] - native["requested_start_bytes"]
                           if native else None)
            if native_left is not None and left_req == native_left and left_req > 0:
                print(f"note: {name}: {left} B still allocated at the end, as much as PyTorch's "
                      f"own allocator keeps ({native_left} B requested): PyTorch holds it")
            else:
                failures.append(f"{name}: allocated {r['allocated_end_bytes']} B at the end, "
                                f"{r['allocated_start_bytes']} B at the start ({left_req} B "
                                f"requested left; native: {native_left})")
        if r["stats_before_delete"].get("num_ooms", 0):
            failures.append(f"{name}: {r['stats_before_delete']['num_ooms']} OOMs")

    print()
    print(f"{'run':<16} {'median step ms':>14} {'peak reserved MiB':>18} {'peak allocated MiB':>19}"
          f" {'reserved/requested':>18} {'reserved after empty_cache MiB':>31}")
    for name, r in results.items():
        req = r["peak_requested_bytes"] or 1
        print(f"{name:<16} {r['step_time_median_s'] * 1e3:>14.2f} "
              f"{r['peak_reserved_bytes'] / MIB:>18.1f} {r['peak_allocated_bytes'] / MIB:>19.1f} "
              f"{r['peak_reserved_bytes'] / req:>18.3f} "
              f"{r['reserved_after_empty_cache_bytes'] / MIB:>31.1f}")
    if native:
        for name in ("ours", "ours_expandable"):
            if name in results:
                r = results[name]
                print(f"{name} / native: step time x{r['step_time_median_s'] / native['step_time_median_s']:.3f}, "
                      f"peak reserved x{r['peak_reserved_bytes'] / max(native['peak_reserved_bytes'], 1):.3f}")
    return failures


def memory_viz(args, snapshot, tag) -> list:
    failures = []
    viz = [sys.executable, "-m", "torch.cuda._memory_viz"]
    for cmd in (["stats", snapshot],
                ["segment_plot", snapshot, "-o", os.path.join(args.work, f"{tag}_segments.html")],
                ["trace_plot", snapshot, "-o", os.path.join(args.work, f"{tag}_trace.html")]):
        rc, out = run(viz + cmd, os.path.join(args.work, f"{tag}_{cmd[0]}.log"))
        if rc != 0:
            failures.append(f"{tag}: _memory_viz {cmd[0]} failed (rc {rc})")
        elif cmd[0] != "stats" and not os.path.getsize(cmd[-1]):
            failures.append(f"{tag}: _memory_viz {cmd[0]} wrote an empty {cmd[-1]}")
    flamegraph = f"/tmp/{os.getuid()}_flamegraph.pl"
    if os.path.exists(flamegraph):
        rc, _ = run(viz + ["segments", snapshot, "-o", os.path.join(args.work, f"{tag}.svg")],
                    os.path.join(args.work, f"{tag}_segments_svg.log"))
        if rc != 0:
            failures.append(f"{tag}: _memory_viz segments failed (rc {rc})")
    else:
        print(f"note: _memory_viz segments not run: it would download {flamegraph}")
    return failures


def snapshots(args) -> list:
    failures = []
    native = os.path.join(args.work, "native_snapshot.pickle")
    rc, _ = run([sys.executable, os.path.join(args.examples, "record_snapshot.py"), "--out", native,
                 "--gzip"], os.path.join(args.work, "record_snapshot.log"),
                env=env_with(PYTORCH_CUDA_ALLOC_CONF=None))
    if rc != 0 or not os.path.exists(native):
        failures.append(f"record_snapshot.py failed (rc {rc})")
    else:
        gz = os.path.getsize(native + ".gz")
        if gz > 1 << 20:
            failures.append(f"record_snapshot.py's default snapshot is {gz} B gzip-compressed "
                            "(over 1 MiB)")
        failures += memory_viz(args, native, "native")

    ours = os.path.join(args.work, "ours_snapshot.pickle")
    out = os.path.join(args.work, "ours_snapshot_run.json")
    if os.path.exists(ours):
        os.remove(ours)
    rc, _ = run([sys.executable, os.path.join(args.examples, "torch_pluggable.py"), "--allocator",
                 "ours", "--lib", args.lib, "--steps", "12", "--snapshot", ours, "--json", out],
                os.path.join(args.work, "ours_snapshot_run.log"),
                env=env_with(GPU_BASICS_ALLOC_HISTORY="20000", GPU_BASICS_ALLOC_CONF=None))
    if rc != 0:
        failures.append(f"torch_pluggable.py --snapshot failed (rc {rc})")
        return failures
    with open(out) as f:
        snap = json.load(f)["snapshot"]
    if snap["rc"] != 0:
        failures.append(f"gpu_basics_torch_write_snapshot returned {snap['rc']}: {snap['error']}")
        return failures
    failures += memory_viz(args, ours, "ours")
    return failures


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["pluggable", "snapshots"])
    p.add_argument("--lib", required=True)
    p.add_argument("--examples", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--steps", type=int, default=30)
    args = p.parse_args()
    os.makedirs(args.work, exist_ok=True)
    import torch
    if not torch.cuda.is_available():
        print("skipped: PyTorch sees no CUDA device")
        return 77
    failures = pluggable(args) if args.mode == "pluggable" else snapshots(args)
    for f in failures:
        print("FAIL:", f)
    print("FAILED" if failures else "PASSED", args.mode)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
