#!/usr/bin/env python3
"""Wall time and peak memory of the results readers on large valid inputs, beside their bounds.

    bench/results_io.py [--gpu-basics build/host-only/gpu-basics] [--work DIR] [--reps 3]

Runs the real CLI, one child process per measurement, on inputs that bench/make_results.py makes
in --work (once; kept for later runs): a 65 MB results file and a fleet of 500 runs. Prints, for
each command, the median wall time and the largest peak RSS over --reps runs (getrusage of the
child), with its bound. Exit status 1 when a figure is over its bound. Not a test: a loaded
machine can exceed a bound that an idle one meets; run it on a quiet machine.
"""
import argparse
import glob
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)


def measure(argv, reps):
    """Median wall seconds and largest peak RSS (MiB) of `argv` over `reps` runs."""
    walls, rss = [], []
    for _ in range(reps):
        start = time.perf_counter()
        child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(child.pid, 0)
        walls.append(time.perf_counter() - start)
        rss.append(usage.ru_maxrss / 1024)  # KiB on Linux
        code = os.waitstatus_to_exitcode(status)
        err = child.stderr.read().decode(errors="replace")
        child.stderr.close()
        if code not in (0, 10):  # 10: the fleet has degraded nodes, as made
            raise SystemExit(f"{' '.join(argv)}: exit {code}: {err.strip()}")
    return statistics.median(walls), max(rss)


def make_inputs(gpu_basics, work):
    big = os.path.join(work, "big.json")
    fleet = os.path.join(work, "fleet")
    if not os.path.exists(big):
        subprocess.run([sys.executable, os.path.join(HERE, "make_results.py"), "big", big,
                        "--gpu-basics", gpu_basics], check=True)
    if len(glob.glob(os.path.join(fleet, "*.json"))) < 500:
        subprocess.run([sys.executable, os.path.join(HERE, "make_results.py"), "fleet", fleet,
                        "--gpu-basics", gpu_basics], check=True)
    return big, sorted(glob.glob(os.path.join(fleet, "*.json")))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gpu-basics", default=os.path.join(REPO, "build", "host-only", "gpu-basics"))
    p.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "gpu-basics-results-io"))
    p.add_argument("--reps", type=int, default=3)
    args = p.parse_args()
    exe = os.path.abspath(args.gpu_basics)
    os.makedirs(args.work, exist_ok=True)
    big, fleet = make_inputs(exe, args.work)
    html = os.path.join(args.work, "out.html")
    small = os.path.join(REPO, "tests", "data", "h200_all.json")
    cases = [  # name, argv, bound in s, bound in MiB
        (f"report, one {os.path.getsize(big) / 1e6:.0f} MB run", [exe, "report", big, "-o", html],
         3.0, 1024),
        (f"compare --fleet, {len(fleet)} runs", [exe, "compare", "--fleet", *fleet], 5.0, None),
        (f"report, {len(fleet)} runs", [exe, "report", *fleet, "-o", html], None, None),
        ("show h200_all.json (start-up)", [exe, "show", small], 0.05, 30),
    ]
    over = False
    print(f"{'command':<34} {'wall s':>8} {'bound':>6} {'peak MiB':>9} {'bound':>6}")
    for name, argv, wall_bound, rss_bound in cases:
        reps = args.reps * 5 if wall_bound and wall_bound < 1 else args.reps
        wall, rss = measure(argv, reps)
        bad = (wall_bound and wall > wall_bound) or (rss_bound and rss > rss_bound)
        over = over or bool(bad)
        print(f"{name:<34} {wall:8.3f} {wall_bound or '-':>6} {rss:9.0f} {rss_bound or '-':>6}"
              f"{'  OVER' if bad else ''}")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
