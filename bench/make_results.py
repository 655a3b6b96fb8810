#!/usr/bin/env python3
"""Large but valid results files, grown from a real run, for benchmarking the readers.

    bench/make_results.py big OUT.json [--mb 65] [--gpu-basics BIN]
    bench/make_results.py fleet OUT_DIR [--nodes 500] [--gpu-basics BIN]

`big`: tests/data/h200_all.json as a run with many more timed samples per copy and matmul
(benchmark.iterations, up to 100000 in the configuration) and 1024 double-buffering batches (the
configuration's most), every summary recomputed from the grown samples; the iterations are
chosen so that the file is about --mb MB.

`fleet`: one `all` run per node, as a fleet of like machines gives them: each node has its own
host name, GPU bus id and start time, its own speed (a few tenths of a percent around the
recorded run) and its own noise; one node in fifty has a slow host link (Gen4 x8: pinned copies at
half speed) and one in a hundred lost its profile lesson (an error in its place).

With --gpu-basics, each file's tables are rendered again from its results
(`gpu-basics show FILE --json FILE`), so they match what gpu-basics would have written.
"""
import argparse
import copy
import json
import math
import os
import random
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(os.path.dirname(HERE), "tests", "data", "h200_all.json")


def quantile(v, q):
    """Linear-interpolated quantile of sorted v (core/stats.cpp's sorted_quantile)."""
    pos = q * (len(v) - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def summarize(samples):
    v = sorted(samples)
    n = len(v)
    mean = sum(v) / n
    stdev = math.sqrt(sum((x - mean) ** 2 for x in v) / (n - 1)) if n > 1 else 0.0
    median, p25, p75 = quantile(v, 0.5), quantile(v, 0.25), quantile(v, 0.75)
    return {"count": n, "median": median, "mean": mean, "min": v[0], "max": v[-1],
            "stdev": stdev, "p25": p25, "p75": p75, "iqr": p75 - p25,
            "rel_spread": (p75 - p25) / abs(median) if median else 0.0}


def timed_figures(node):
    """Every object with per-sample "seconds" (copies, host memcpys, matmuls), depth first."""
    if isinstance(node, dict):
        if isinstance(node.get("seconds"), list) and node["seconds"]:
            yield node
        for v in node.values():
            yield from timed_figures(v)
    elif isinstance(node, list):
        for v in node:
            yield from timed_figures(v)


def resample(seconds, n, rng, speed=1.0, noise=0.002):
    """n samples drawn from the recorded ones, each slowed by 1/speed and jittered."""
    return [rng.choice(seconds) / speed * (1 + rng.gauss(0, noise)) for _ in range(n)]


def regrow(fig, n, rng, speed=1.0, noise=0.002):
    """The figure with n samples and its summaries recomputed from them."""
    fig["seconds"] = resample(fig["seconds"], n, rng, speed, noise)
    if fig.get("seconds_joint"):
        fig["seconds_joint"] = resample(fig["seconds_joint"], n, rng, speed, noise)
    if "time_s" in fig:
        fig["time_s"] = summarize(fig["seconds"])
    if "bandwidth_bytes_per_s" in fig:
        fig["bandwidth_bytes_per_s"] = summarize([fig["bytes_moved"] / s for s in fig["seconds"]])
    if "flops_per_s" in fig:
        work = 2 * fig["m"] * fig["n"] * fig["k"]
        fig["flops_per_s"] = summarize([work / s for s in fig["seconds"]])


def grow_batches(db, batches):
    """Each mode's measured batches continued, step after step, to `batches`."""
    for ratio in db.get("ratios", []):
        for mode in ratio.get("modes", []):
            have = mode.get("batches") or []
            if len(have) < 2:
                continue
            step = have[-1]["copy_start_s"] - have[-2]["copy_start_s"]
            while len(have) < batches:
                have.append({k: v + step for k, v in have[-1].items()})
    db["batches"] = batches


def set_iterations(run, n):
    run["environment"]["config"]["benchmark"]["iterations"] = n
    if "transfer" in run["results"]:
        run["results"]["transfer"]["iterations"] = n


def write(run, path):
    with open(path, "w") as f:
        json.dump(run, f, indent=2, sort_keys=True)
        f.write("\n")


def refresh_tables(gpu_basics, path):
    """The file's tables rendered again from its results."""
    if not gpu_basics:
        return
    tmp = path + ".tmp.json"
    done = subprocess.run([gpu_basics, "show", path, "--json", tmp], stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{gpu_basics} show {path}: {done.stderr.strip()}")
    os.replace(tmp, path)


def big_run(base, iterations, batches, seed=1):
    rng = random.Random(seed)
    run = copy.deepcopy(base)
    for fig in timed_figures(run["results"]):
        regrow(fig, iterations, rng)
    set_iterations(run, iterations)
    db = run["results"].get("transfer", {}).get("double_buffer")
    if db:
        grow_batches(db, batches)
        run["environment"]["config"]["transfer"]["double_buffer"]["batches"] = batches
    return run


def make_big(args):
    base = json.load(open(SOURCE))
    target = args.mb * 1e6
    size = {}
    with tempfile.TemporaryDirectory() as tmp:  # the size per sample, measured at two counts
        for n in (20, 1000):
            write(big_run(base, n, args.batches), os.path.join(tmp, "probe.json"))
            size[n] = os.path.getsize(os.path.join(tmp, "probe.json"))
    per_sample = (size[1000] - size[20]) / 980
    iterations = max(20, min(100000, int(20 + (target - size[20]) / per_sample)))
    write(big_run(base, iterations, args.batches), args.out)
    refresh_tables(args.gpu_basics, args.out)
    print(f"{args.out}: {os.path.getsize(args.out) / 1e6:.1f} MB, {iterations} samples per "
          f"timed figure, {args.batches} double-buffering batches")


def node_run(base, i, rng):
    run = copy.deepcopy(base)
    env = run["environment"]
    env["host"]["hostname"] = f"gpu-node-{i:03d}"
    env["timestamp_utc"] = f"2025-06-{1 + i % 28:02d}T{i % 24:02d}:{(7 * i) % 60:02d}:00Z"
    for g in env.get("gpus", []):
        g["pci_bus_id"] = f"0000:{(i % 200) + 16:02x}:00.0"
    speed = rng.gauss(1.0, 0.004)
    slow_link = i % 50 == 49
    for fig in timed_figures(run["results"]):
        pinned_host_copy = fig.get("memory") == "pinned" and fig.get("direction") in ("H2D",
                                                                                       "D2H")
        regrow(fig, len(fig["seconds"]), rng, speed * (0.5 if slow_link and pinned_host_copy
                                                       else 1.0), noise=0.01)
    if slow_link:
        for g in env.get("gpus", []):
            g["pcie_generation_current"], g["pcie_width_current"] = 4, 8
            g["pcie_link_bytes_per_s"] = 16e9 * 128 / 130
    if i % 100 == 99 and "profile" in run["results"]:
        del run["results"]["profile"]
        run["errors"]["profile"] = "cuBLAS error: CUBLAS_STATUS_EXECUTION_FAILED (in cublasLtMatmul)"
    return run


def make_fleet(args):
    base = json.load(open(SOURCE))
    rng = random.Random(7)
    os.makedirs(args.out, exist_ok=True)
    for i in range(args.nodes):
        path = os.path.join(args.out, f"gpu-node-{i:03d}.json")
        write(node_run(base, i, rng), path)
        refresh_tables(args.gpu_basics, path)
    total = sum(os.path.getsize(os.path.join(args.out, f)) for f in os.listdir(args.out))
    print(f"{args.out}: {args.nodes} runs, {total / 1e6:.0f} MB")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="what", required=True)
    b = sub.add_parser("big", help="one large results file")
    b.add_argument("out")
    b.add_argument("--mb", type=float, default=65)
    b.add_argument("--batches", type=int, default=1024)
    b.add_argument("--gpu-basics")
    f = sub.add_parser("fleet", help="one results file per node")
    f.add_argument("out")
    f.add_argument("--nodes", type=int, default=500)
    f.add_argument("--gpu-basics")
    args = p.parse_args()
    (make_big if args.what == "big" else make_fleet)(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
