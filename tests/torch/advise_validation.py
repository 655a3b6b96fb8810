#!/usr/bin/env python3
"""`gpu-basics advise` checked against PyTorch itself, on a GPU: every recommendation is run as
printed.

    python advise_validation.py run --gpu-basics BUILD/gpu-basics --examples examples --work DIR
                                    [--json OUT.json] [--workloads transformer,kv_cache,...]

Four workloads of different shapes (advise_workloads.py: a transformer's training steps; a KV
cache grown a token at a time; training fed by a side stream that copies the next batch from
pinned memory; a DataLoader with pin_memory=True), each in fresh processes. For each:

1. Record: the workload runs with PyTorch's defaults (no allocator setting in its environment)
   and its memory history from the first allocation; that run's max_memory_reserved is the
   defaults' measured peak.
2. The printed line, verbatim. For each of the advice below, the child is started as
       bash -c '<recommended.torch_env of advise's JSON>'$'\\n''exec "$@"' _ PYTHON CHILD ARGS
   the line unmodified as the first statement of the script, with no allocator setting in the
   environment before it, and the directory of this Python (its `python`) first on PATH so that a
   fraction the line computes with $(python -c ...) is computed by the PyTorch that runs the job.
   The child sets no allocator setting and no memory fraction of its own.
   - `advise SNAPSHOT` (no --fit): no out-of-memory error; measured max_memory_reserved within 1%
     or one 2 MiB page (whichever is larger) of the predicted peak (the recommended policy's
     peak_reserved_bytes); and not above the defaults' measured peak where the prediction is below
     the defaults' predicted peak.
   - `advise SNAPSHOT --fit L --device-memory M` (M: torch.cuda.mem_get_info()[1], measured in a
     child), with L the defaults' smallest limit +2% rounded up to 2 MiB: the defaults fit L but
     their peak without a limit passes it, so the line must carry per_process_memory_fraction.
     No out-of-memory error and max_memory_reserved <= L.
   - the same without --device-memory: the line computes its fraction in the shell; same checks.
   - where the recommendation without --fit fits below the defaults' smallest limit: `--fit L2
     --device-memory M` with L2 its smallest limit +2% (so another policy must be chosen); same
     checks.
   A line whose advice sets a limit (line_limit_bytes) must carry a fraction. The predicted peak
   and its difference are shown for the rows with --fit too, as information.
3. The limit claims (these may use torch.cuda.set_per_process_memory_fraction, as a bisection
   does): the defaults' replayed peak equals the recorded one; for the defaults and for the
   recommendation of the advice without --fit, the workload runs under the smallest limit
   advise bisected +2%, and raises torch.OutOfMemoryError at the lowest placement's smallest
   limit -2% (with the policy's conf in PYTORCH_CUDA_ALLOC_CONF).

A table per workload is printed (and written to --json): a row per printed line run (the line,
predicted and measured peak, difference, limit, OOM, verdict), then the limit claims. When a
check fails, the same child runs RERUNS more times with PyTorch's memory history on (within
RERUN_BUDGET_S in all), and the report says how many reruns agreed and where their traces part
from the recording's and from each other's; their snapshots stay in the work directory.

Exit 0 when every check holds, 1 when one fails, 77 (skipped) without PyTorch or a GPU.
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from advise_checks import (  # noqa: E402  (trace functions re-exported for the tests)
    MARGIN, MIB, describe_difference, describe_placement, diff_percent,
    first_difference, fit_limit, fit_problems, line_command, line_env, line_form_notes, line_of,
    line_problems, load_trace, no_fit_problems, peak_close, placement_range, predicted_peak,
    predicted_range, python_shim,
    tight_limit, trace_summary, workload_report)
import advise_workloads  # noqa: E402  (no PyTorch at import)

__all__ = ["describe_difference", "describe_placement", "first_difference", "load_trace",
           "trace_summary", "rerun", "run_child", "main"]

CHILD = os.path.join(HERE, "advise_workloads.py")
RERUNS = 3
RERUN_BUDGET_S = 240


# ---- children --------------------------------------------------------------------------------

def result_of(p, what: str) -> dict:
    for out in p.stdout.splitlines():
        if out.startswith("RESULT "):
            return json.loads(out[7:])
    raise RuntimeError(f"{what} failed ({p.returncode}): {p.stderr[-2000:]}")


def run_child(args, workload, conf=None, limit=None, record=None, line=None) -> dict:
    """One run of a workload in a fresh process. With `line`: the printed line verbatim, then the
    child (line_command), nothing else setting the allocator. Else the child with `conf` as
    PYTORCH_CUDA_ALLOC_CONF and `limit` through set_per_process_memory_fraction (the limit
    claims)."""
    argv = [sys.executable, CHILD, "--workload", workload, "--examples", args.examples]
    if limit:
        argv += ["--limit", str(int(limit))]
    if record:
        argv += ["--record", record]
    if line is not None:
        if conf is not None or limit:
            raise ValueError("a printed line runs alone: no conf, no limit of the harness")
        cmd, env = line_command(line, argv), line_env(os.environ, args.python_dir)
    else:
        cmd, env = argv, line_env(os.environ, os.path.dirname(sys.executable))
        if conf:
            env["PYTORCH_CUDA_ALLOC_CONF"] = conf
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    return result_of(p, f"{workload} child")


def probe(args) -> dict:
    """torch.cuda.mem_get_info() of the device, seen by a child as the job would see it."""
    env = line_env(os.environ, os.path.dirname(sys.executable))
    p = subprocess.run([sys.executable, CHILD, "--probe"], env=env, capture_output=True,
                       text=True, timeout=300)
    return result_of(p, "the device probe")


def rerun(args, workload, conf, limit, recording, tag, agrees, deadline=None, line=None) -> dict:
    """The failed check's child again, RERUNS times with history: how many reruns agreed with the
    prediction (`agrees(result)`), and where their traces part from the recording's (requests,
    to a rerun's out-of-memory error) and from each other's (segments). A rerun that fails or
    starts after `deadline` (time.monotonic()) is reported, not raised."""
    base = trace_summary(load_trace(recording))
    runs, notes, outcomes = [], [], []
    extra = {"line": line} if line is not None else {}
    for k in range(RERUNS):
        if deadline is not None and time.monotonic() > deadline:
            notes.append(f"rerun {k} and later: skipped, the reruns' time budget is spent")
            break
        path = os.path.join(args.work, f"{workload}.{tag}.rerun{k}.pickle")
        try:
            r = run_child(args, workload, conf=conf, limit=limit, record=path, **extra)
            t = trace_summary(load_trace(path))
        except Exception as e:  # noqa: BLE001 - a diagnostic must not hide the failure it explains
            outcomes.append("failed")
            notes.append(f"rerun {k}: failed: {str(e)[-300:]}")
            continue
        outcomes.append("OOM" if r["oom"] else "runs")
        mine = base["requests"][:len(t["requests"])] if t["oom"] else base["requests"]
        notes.append(f"rerun {k}: {outcomes[-1]}, max reserved {r['max_reserved'] / 2**20:.1f} "
                     f"MiB, {'agrees' if agrees(r) else 'disagrees'} with the prediction, "
                     f"{t['reused_addresses']} segment(s) at reused addresses; "
                     + describe_difference("requests", mine, t["requests"], "recording",
                                           f"rerun {k}")
                     + "; " + describe_placement(base["placement"], t["placement"], "recording",
                                                 f"rerun {k}"))
        runs.append((k, path, r, t))
    for k, _, _, t in runs[1:]:
        notes.append(describe_difference(f"segments, rerun {runs[0][0]} vs {k}",
                                         runs[0][3]["segments"], t["segments"],
                                         f"rerun {runs[0][0]}", f"rerun {k}")
                     + "; " + describe_placement(runs[0][3]["placement"], t["placement"],
                                                 f"rerun {runs[0][0]}", f"rerun {k}"))
    return {"outcomes": outcomes, "agreed": sum(1 for _, _, r, _ in runs if agrees(r)),
            "max_reserved": [r["max_reserved"] for _, _, r, _ in runs],
            "snapshots": [p for _, p, _, _ in runs], "notes": notes}


def advise(args, workload, snap, tag, fits=(), device_memory=None) -> dict:
    """`gpu-basics advise SNAPSHOT [--fit L]... [--device-memory M] --json`: the advice read back
    (its printed output kept beside it as WORKLOAD.TAG.advise.txt)."""
    path = os.path.join(args.work, f"{workload}.{tag}.advice.json")
    cmd = [args.gpu_basics, "advise", snap, "--json", path]
    for f in fits:
        cmd += ["--fit", str(int(f))]
    if device_memory:
        cmd += ["--device-memory", str(int(device_memory))]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    with open(os.path.join(args.work, f"{workload}.{tag}.advise.txt"), "w") as f:
        f.write("$ " + " ".join(cmd) + "\n" + p.stdout + p.stderr)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[1:])} failed ({p.returncode}): {p.stderr[-2000:]}")
    with open(path) as f:
        adv = json.load(f)
    adv["_seconds"] = time.perf_counter() - t0
    return adv


# ---- the checks ------------------------------------------------------------------------------

def limit_claims(args, workload, adv, rec, snap, deadline) -> list:
    """The defaults' replay against the recording, and the bisected limits at +2% (runs) and -2%
    (out of memory) for the defaults and the recommendation, under set_per_process_memory_fraction
    with the policy's conf."""
    # The replay places segments at ascending addresses; the driver may not. The recorded peak
    # must be the replay's, or within the defaults' peaks over advise's placements of segments.
    defaults_peak = adv["policies"][0]["peak_reserved_bytes"]
    by = [e["bytes"] for e in adv["defaults"].get("peak_reserved_by_placement", [])]
    lo, hi = min(by + [defaults_peak]), max(by + [defaults_peak])
    exact = defaults_peak == rec["max_reserved"]
    rows = [{"check": "defaults: recorded peak = replayed, or within its placements",
             "predicted": defaults_peak, "pytorch": rec["max_reserved"],
             "ok": exact or lo <= rec["max_reserved"] <= hi,
             "detail": f"{adv['trace_events']} trace events, advise {adv['_seconds']:.2f} s; "
                       f"{lo / MIB:.0f}-{hi / MIB:.0f} MiB over {len(by)} placements"
                       + ("" if exact else "; the recorded run placed segments otherwise")}]
    policies = [("defaults", adv["defaults"])]
    if adv["recommendation"]["conf"] != "":
        policies.append(("recommended", adv["recommendation"]))
    for who, d in policies:
        # smallest_limit_bytes fits under every placement of segments advise tried; below the
        # lowest placement's smallest limit, none fits.
        conf, smallest = d["conf"], d["smallest_limit_bytes"]
        by = [e["bytes"] for e in d.get("smallest_limit_by_placement", [])] or [smallest]
        span = (f"{min(by) / MIB:.0f}-{max(by) / MIB:.0f} MiB over {len(by)} placements"
                if len(by) > 1 else f"{smallest / MIB:.0f} MiB")
        for sign in (+1, -1):
            limit = (smallest if sign > 0 else min(by)) * (1 + sign * MARGIN)
            r = run_child(args, workload, conf=conf, limit=limit)
            want_oom = sign < 0
            where = "smallest" if sign > 0 else "lowest placement's smallest"
            rows.append({"check": f"{who} ({conf or 'defaults'}) at {where} {sign * 2:+d}%",
                         "predicted": "OOM" if want_oom else "runs",
                         "pytorch": "OOM" if r["oom"] else "runs", "ok": r["oom"] == want_oom,
                         "detail": f"limit {limit / MIB:.1f} MiB (smallest {smallest / MIB:.0f}"
                                   f" MiB; {span}); max reserved {r['max_reserved'] / MIB:.1f} MiB"
                                   + (f"; {r['message']}" if r["oom"] else "")})
            if not rows[-1]["ok"]:
                rows[-1]["reruns"] = rerun(args, workload, conf, limit, snap,
                                           f"{who}{sign * 2:+d}pct",
                                           lambda x, w=want_oom: x["oom"] == w, deadline)
    return rows


def line_row(args, workload, tag, check, adv, ctx, limit=None, device_memory_given=True) -> dict:
    """The advice's printed line run verbatim, and its verdict: without a limit, against the
    prediction and the defaults' measured peak; with --fit L, within L and without OOM."""
    line, predicted = line_of(adv), predicted_range(adv)
    row = {"check": check, "line": line, "predicted": predicted, "limit": limit,
           "line_limit": adv.get("line_limit_bytes"), "use_conf": adv["recommended"]["use_conf"],
           "gbt": adv["recommended"]["gbt"], "advise_seconds": adv["_seconds"],
           "problems": line_problems(adv), "notes": []}
    if limit is not None:
        row["notes"] += line_form_notes(adv, device_memory_given)
        if not all(adv.get("fit_choice_everywhere") or [True]):
            row["notes"].append("advise says no policy fits this limit under every placement")
    defaults_predicted = placement_range(adv["defaults"], adv["policies"][0].get(
        "peak_reserved_bytes"))

    def problems_of(r):
        if limit is None:
            return no_fit_problems(r, predicted, defaults_predicted, ctx["defaults_measured"])
        return fit_problems(r, limit)

    try:
        r = run_child(args, workload, line=line)
    except Exception as e:  # noqa: BLE001 - the row says why the line did not run
        row.update(ok=False, oom=None, measured=None)
        row["problems"].append(f"the line did not run: {str(e)[-600:]}")
        return row
    row.update(measured=r["max_reserved"], oom=r["oom"], env_seen=r.get("env_seen"),
               value=r.get("value"), child_seconds=r.get("seconds"),
               diff_percent=diff_percent(predicted_peak(adv), r["max_reserved"]))
    measured_problems = problems_of(r)
    row["problems"] += measured_problems
    if limit is not None and not peak_close(predicted, r["max_reserved"]):
        row["notes"].append("measured peak off the prediction by more than 1% or a page")
    row["ok"] = not row["problems"]
    if measured_problems:  # what PyTorch did, not what the line says: again, with history
        row["reruns"] = rerun(args, workload, None, None, ctx["snapshot"], f"line_{tag}",
                              lambda x: not problems_of(x), ctx["deadline"], line=line)
    return row


def line_rows(args, workload, adv0, snap, ctx) -> tuple:
    """The rows of printed lines: no --fit; --fit L with the device's memory; --fit L with the
    fraction left to the shell; --fit L2 below the defaults' smallest limit, where there is one.
    Returns (rows, notes)."""
    notes = []
    rows = [line_row(args, workload, "nofit", "no --fit", adv0, ctx)]
    limit, why = fit_limit(adv0)
    if why:
        notes.append(why)
    total, fit = ctx["device_memory"], f"--fit {limit / MIB:.0f}MiB"
    adv = advise(args, workload, snap, "fit", [limit], total)
    rows.append(line_row(args, workload, "fit", f"{fit} (device memory given)", adv, ctx, limit,
                         True))
    adv = advise(args, workload, snap, "fit_shell", [limit])
    rows.append(line_row(args, workload, "fit_shell", f"{fit} (fraction from the shell)", adv,
                         ctx, limit, False))
    tight = tight_limit(adv0)
    if tight is None:
        notes.append("no --fit below the defaults' smallest limit: the recommendation without "
                     "--fit is the defaults or within 2% of them")
    else:
        adv = advise(args, workload, snap, "fit_tight", [tight], total)
        rows.append(line_row(args, workload, "fit_tight", f"--fit {tight / MIB:.0f}MiB (below "
                             "the defaults' smallest; device memory given)", adv, ctx, tight,
                             True))
    return rows, notes


def validate(args, workload, device_memory, deadline) -> dict:
    t0 = time.monotonic()
    os.makedirs(args.work, exist_ok=True)
    for name in os.listdir(args.work):  # an earlier run's reruns would pass for this one's
        if name.startswith(f"{workload}.") and ".rerun" in name and name.endswith(".pickle"):
            os.remove(os.path.join(args.work, name))
    snap = os.path.join(args.work, f"{workload}.pickle")
    w = {"workload": workload, "rows": [], "claims": [], "notes": []}
    try:
        rec = run_child(args, workload, record=snap)
        if rec["oom"]:
            raise RuntimeError(f"out of memory without a limit: {rec['message']}")
        w["defaults_measured"] = rec["max_reserved"]
        adv0 = advise(args, workload, snap, "nofit")
        ctx = {"defaults_measured": rec["max_reserved"], "snapshot": snap, "deadline": deadline,
               "device_memory": device_memory}
        w["rows"], w["notes"] = line_rows(args, workload, adv0, snap, ctx)
        w["claims"] = limit_claims(args, workload, adv0, rec, snap, deadline)
    except Exception as e:  # noqa: BLE001 - one workload's failure is reported with the others
        w["error"] = f"{type(e).__name__}: {str(e)[-2000:]}"
    w["seconds"] = time.monotonic() - t0
    w["ok"] = ("error" not in w and all(r["ok"] for r in w["rows"])
               and all(c["ok"] for c in w["claims"]))
    return w


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["run"])
    p.add_argument("--gpu-basics", required=True)
    p.add_argument("--examples", required=True)
    p.add_argument("--work", default="advise_work")
    p.add_argument("--json")
    p.add_argument("--workloads", default=",".join(advise_workloads.NAMES),
                   help="comma-separated, of " + ", ".join(advise_workloads.NAMES))
    args = p.parse_args()
    args.examples = os.path.abspath(args.examples)
    args.work = os.path.abspath(args.work)
    args.gpu_basics = os.path.abspath(args.gpu_basics)
    names = [n for n in args.workloads.split(",") if n]
    unknown = [n for n in names if n not in advise_workloads.NAMES]
    if unknown:
        p.error(f"unknown workload(s): {', '.join(unknown)}")
    try:
        import torch
        if not torch.cuda.is_available():
            print("skipped: no CUDA device visible to PyTorch")
            return 77
    except ImportError:
        print("skipped: no PyTorch")
        return 77
    os.makedirs(args.work, exist_ok=True)
    args.python_dir = python_shim(sys.executable, args.work)
    t0 = time.monotonic()
    device = probe(args)
    print(f"{device['name']}, PyTorch {device['torch']} (CUDA {device['cuda']}), "
          f"mem_get_info total {device['mem_get_info_total']} B; `python` on the line's PATH: "
          f"{args.python_dir}", flush=True)
    deadline = time.monotonic() + RERUN_BUDGET_S  # the reruns' share of ctest's 900 s
    results = []
    for name in names:
        w = validate(args, name, device["mem_get_info_total"], deadline)
        results.append(w)
        print("\n" + workload_report(w), flush=True)
    ok = all(w["ok"] for w in results)
    total_s = time.monotonic() - t0
    print(f"\n{sum(w['ok'] for w in results)} of {len(results)} workloads hold; "
          f"{total_s:.0f} s in all")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": device, "ok": ok, "seconds": total_s, "workloads": results}, f,
                      indent=2)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
