#!/usr/bin/env python3
"""`gpu-basics preflight` checked against PyTorch itself, on a GPU: the peaks it predicts at
batches never recorded, and the largest batch it says fits a limit.

    python preflight_validation.py run --gpu-basics BUILD/gpu-basics --work DIR [--json OUT.json]
                                       [--workloads transformer,cnn,mlp_embedding] [--limit SIZE]

Three training workloads of different shapes (preflight_workloads.py: a decoder transformer in
bf16 autocast with AdamW; a ResNet-like CNN with SGD; an MLP over a large embedding with Adam),
each run in fresh processes with PyTorch's defaults (no allocator setting in their environment)
for 3 steps. For each workload:

1. Record: the workload at 3 small batches (4, 8, 16), its memory history from the first
   allocation, one snapshot each.
2. Predict: `gpu-basics preflight S4 S8 S16 --batches 4,8,16 --at ... --json -` at the recorded
   and --at batches (32, 64, 128); the limit L is halfway between the defaults' predicted peaks at the
   two largest --at batches (or --limit); then `preflight ... --at 32 --at 64 --at 128 --fit L
   --json -` (timed: the wall time of the call, and preflight's own count); then, for the largest
   batch it says fits under the defaults (B) and the batch above (B + 1: its search bisects down
   to one batch), `preflight ... --at B --at B+1 --json -`. Exit 2 (a refusal: recordings that
   cannot be aligned or modelled) fails the workload with preflight's message.
3. The peaks: PyTorch at each --at batch and at B, without a limit: max_memory_reserved within 3%
   of the predicted peak_reserved_bytes of the defaults (the signed difference is reported). The
   recorded batches are shown as information.
4. The fit: under torch.cuda.set_per_process_memory_fraction(F), F the smallest fraction whose
   cap floor(F * total) is L (the cap applies to what the caching allocator reserves; the CUDA
   context is not counted, as preflight does not count it): batch B runs, batch B + 1 raises
   torch.OutOfMemoryError. Where preflight recommends a policy (largest_batch.policy not ""), its
   largest batch runs under the same fraction with PYTORCH_CUDA_ALLOC_CONF set to exactly that
   policy (a check: no out-of-memory error; its batch above is not run).
5. The device (unless --no-device): `preflight ... --fit D` with D the memory a fresh process has
   free on the device less 2 GiB (what a job holds outside PyTorch's allocator); PyTorch at that
   largest batch, without a limit: it runs, its peak reserved within 3% of the prediction.

A table per workload is printed (and everything written to --json). Exit 0 when every check holds,
1 when one fails, 77 (skipped) without PyTorch or a GPU.
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from preflight_checks import (  # noqa: E402
    LARGEST_RUN_FACTOR, NAMES, SPECS, PreflightFailed, child_command, child_env, choose_limit,
    device_limit, fit_row, fraction_for, largest_batch, margin_notes, merged_predictions, mib, parse_preflight,
    peak_row, prediction, preflight_command, step_above, summary, workload_ok, workload_report)

CHILD = os.path.join(HERE, "preflight_workloads.py")
CHILD_TIMEOUT_S = 90
DEVICE_CHILD_TIMEOUT_S = 240  # a run as large as the device holds
PREFLIGHT_TIMEOUT_S = 90


# ---- children --------------------------------------------------------------------------------

def run_child(args, workload, batch, record=None, fraction=None, conf=None, tag=None,
              timeout=CHILD_TIMEOUT_S) -> dict:
    """One run of a workload in a fresh process: its result (the child's JSON)."""
    tag = tag or f"b{batch}"
    out = os.path.join(args.work, f"{workload}.{tag}.result.json")
    if os.path.exists(out):
        os.remove(out)
    cmd = child_command(sys.executable, CHILD, workload, batch, out, record=record,
                        fraction=fraction)
    p = subprocess.run(cmd, env=child_env(os.environ, conf), capture_output=True, text=True,
                       timeout=timeout)
    if p.returncode != 0 or not os.path.exists(out):
        raise RuntimeError(f"{workload} at batch {batch} ({tag}) failed ({p.returncode}): "
                           f"{p.stderr[-2000:]}")
    with open(out) as f:
        r = json.load(f)
    print(f"  {workload} batch {batch} ({tag}): "
          + ("OOM" if r["oom"] else "runs") + f", max reserved {mib(r['max_reserved'])} MiB, "
          f"{r['seconds']:.1f} s", flush=True)
    return r


def probe(args) -> dict:
    out = os.path.join(args.work, "probe.json")
    p = subprocess.run([sys.executable, CHILD, "probe", "--json", out], env=child_env(os.environ),
                       capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
    if p.returncode != 0:
        raise RuntimeError(f"the device probe failed ({p.returncode}): {p.stderr[-2000:]}")
    with open(out) as f:
        return json.load(f)


def preflight(args, w, purpose, snaps, batches, at=(), fit=None) -> dict:
    """One `gpu-basics preflight ... --json -` call, timed and logged in w["preflight"]; its JSON,
    or PreflightFailed with its message."""
    cmd = preflight_command(args.gpu_basics, snaps, batches, at, fit)
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=PREFLIGHT_TIMEOUT_S)
    wall = time.perf_counter() - t0
    call = {"purpose": purpose, "args": [os.path.basename(c) for c in cmd],
            "returncode": p.returncode, "wall_seconds": wall}
    w["preflight"].append(call)
    with open(os.path.join(args.work, f"{w['workload']}.preflight.log"), "a") as f:
        f.write("$ " + " ".join(cmd) + f"\n(exit {p.returncode}, {wall:.2f} s)\n"
                + p.stdout + p.stderr + "\n")
    pf = parse_preflight(p.returncode, p.stdout, p.stderr, cmd)
    call["seconds_reported"] = pf.get("seconds")
    print(f"  preflight ({purpose}): {wall:.2f} s", flush=True)
    return pf


# ---- the checks ------------------------------------------------------------------------------

def fit_checks(args, w, pf, preds, limit, total) -> list:
    """The largest batch under the defaults runs within the limit, the batch above runs out of
    memory; the recommended policy's largest batch runs with its conf."""
    rows = []
    fraction = fraction_for(limit, total)
    largest = largest_batch(pf, "defaults")
    above = step_above(largest)
    if largest is None:
        rows.append(fit_row("defaults: preflight says every batch fits", None, limit, False,
                            None))
        rows[-1]["problems"] = ["largest_batch.defaults is null (nothing grows with the batch), "
                                "yet the workload's activations grow with it"]
        rows[-1]["ok"] = False
        return rows
    w["notes"] += margin_notes(preds, largest, above, limit)
    if largest > 0:
        r = run_child(args, w["workload"], largest, fraction=fraction, tag=f"fit_b{largest}")
        rows.append(fit_row("defaults: the largest batch that fits", largest, limit, False, r,
                            prediction(preds, largest)))
    else:
        w["notes"].append("preflight says no batch fits the limit: only batch 1's OOM is run")
    r = run_child(args, w["workload"], above, fraction=fraction, tag=f"fit_b{above}")
    rows.append(fit_row("defaults: the batch above does not fit", above, limit, True, r,
                        prediction(preds, above)))
    policy = pf["largest_batch"].get("policy") or ""
    rec = largest_batch(pf, "recommended")
    if not policy:
        w["notes"].append("the recommended policy is the defaults: no run of its own")
    elif not rec:
        w["notes"].append(f"recommended {policy}: largest batch {rec}, not run")
    elif rec > LARGEST_RUN_FACTOR * max(SPECS[w["workload"]]["at"]):
        w["notes"].append(f"recommended {policy}: largest batch {rec} beyond "
                          f"{LARGEST_RUN_FACTOR}x the largest --at batch, not run")
    else:
        r = run_child(args, w["workload"], rec, fraction=fraction, conf=policy,
                      tag=f"fit_recommended_b{rec}")
        rows.append(fit_row(f"recommended ({policy}): its largest batch fits", rec, limit,
                            False, r, prediction(preds, rec, "recommended"), conf=policy))
    return rows


def device_pass(args, w, snaps, record, device) -> None:
    """The largest batch that fits the whole device (its free memory less what a job holds outside
    PyTorch's allocator): predicted, then run by PyTorch without a limit, where it must run with
    its peak reserved within the tolerance of the prediction."""
    limit = device_limit(device["free"])
    w["device_limit"] = limit
    pf = preflight(args, w, "the largest batch on the device", snaps, record, (), limit)
    b = largest_batch(pf, "defaults")
    w["notes"].append(f"the device: --fit {mib(limit)} MiB (free {mib(device['free'])} MiB less "
                      f"{mib(device['free'] - limit)} MiB), largest batch {b}")
    if not b:  # the device holds no batch (0), or every batch (None): neither is checked
        w["rows"].append(peak_row(b or 0, "largest on the device", None, None))
        w["rows"][-1]["problems"] = [f"preflight's largest batch on the device is {b}: nothing "
                                     "to run"]
        w["rows"][-1]["ok"] = False
        return
    pfb = preflight(args, w, "the device's largest batch", snaps, record, [b])
    w["predictions"] = merged_predictions({"predictions": w["predictions"]}, pfb)["predictions"]
    r = run_child(args, w["workload"], b, tag=f"device_b{b}", timeout=DEVICE_CHILD_TIMEOUT_S)
    w["rows"].append(peak_row(b, "largest on the device", prediction(pfb, b), r))


def validate(args, name, device) -> dict:
    t0 = time.monotonic()
    spec = SPECS[name]
    w = {"workload": name, "record": list(spec["record"]), "at": list(spec["at"]),
         "recorded": [], "rows": [], "fit": [], "preflight": [], "notes": []}
    try:
        snaps = []
        for b in spec["record"]:
            path = os.path.join(args.work, f"{name}.b{b}.pickle")
            if os.path.exists(path):
                os.remove(path)
            r = run_child(args, name, b, record=path, tag=f"record_b{b}")
            if r["oom"]:
                raise RuntimeError(f"out of memory at recorded batch {b}: {r.get('message')}")
            w["recorded"].append(r)
            snaps.append(path)
        record, at = list(spec["record"]), list(spec["at"])
        pf0 = preflight(args, w, "peaks at the recorded and --at batches", snaps, record,
                        record + at)
        total = device["mem_get_info_total"]
        if args.limit:
            limit = args.limit
            w["notes"].append(f"--fit {mib(limit)} MiB (given)")
        else:
            limit, note = choose_limit(pf0, at, total)
            w["notes"].append(note)
        w["limit"] = limit
        pf = preflight(args, w, "--at and --fit", snaps, record, at, limit)
        w["largest_batch"] = pf.get("largest_batch")
        if w["largest_batch"] and not w["largest_batch"].get("monotone", True):
            w["notes"].append("preflight: not monotone (a larger batch fits where a smaller "
                              "one does not)")
        largest = largest_batch(pf, "defaults")
        rec = largest_batch(pf, "recommended")
        extra = sorted({b for b in (largest, step_above(largest), rec) if b} - set(at))
        pf2 = preflight(args, w, "the largest batch and the one above", snaps, record,
                        extra) if extra else None
        preds = merged_predictions(pf, pf2, pf0)
        for b in at:  # the same model asked twice: the same answer
            a, c = prediction(pf0, b), prediction(pf, b)
            if a and c and a["peak_reserved_bytes"] != c["peak_reserved_bytes"]:
                w["notes"].append(f"preflight predicted {a['peak_reserved_bytes']} B and then "
                                  f"{c['peak_reserved_bytes']} B at batch {b} (not deterministic)")
        w["predictions"] = preds["predictions"]
        for b, r in zip(record, w["recorded"]):
            w["rows"].append(peak_row(b, "recorded", prediction(preds, b), r, check=False))
        runs = list(at)
        too_large = bool(largest) and largest > LARGEST_RUN_FACTOR * max(at)
        if largest and largest not in at and not too_large:
            runs.append(largest)
        for b in runs:
            r = run_child(args, name, b, tag=f"peak_b{b}")
            role = "--at" if b in at else "largest (defaults)"
            w["rows"].append(peak_row(b, role, prediction(preds, b), r))
        if too_large:
            w["rows"].append(peak_row(largest, "largest (defaults)", prediction(preds, largest),
                                      None))
            w["rows"][-1]["problems"] = [f"largest batch {largest} beyond {LARGEST_RUN_FACTOR}x "
                                         f"the largest --at batch ({max(at)}): not run"]
            w["rows"][-1]["ok"] = False
        else:
            w["fit"] = fit_checks(args, w, pf, preds, limit, total)
        if not args.no_device:
            device_pass(args, w, snaps, record, device)
    except PreflightFailed as e:
        w["error"] = str(e)
    except Exception as e:  # noqa: BLE001 - one workload's failure is reported with the others
        w["error"] = f"{type(e).__name__}: {str(e)[-2000:]}"
    w["seconds"] = time.monotonic() - t0
    w["ok"] = workload_ok(w)
    return w


def byte_size(text: str) -> int:
    units = {"": 1, "b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30}
    t = text.strip().lower()
    num = t.rstrip("kmgib")
    try:
        return int(float(num) * units[t[len(num):]])
    except (KeyError, ValueError):
        raise argparse.ArgumentTypeError(f"a size such as 20GiB or 512MiB, got {text!r}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("mode", choices=["run"])
    p.add_argument("--gpu-basics", required=True)
    p.add_argument("--work", default="preflight_work")
    p.add_argument("--json")
    p.add_argument("--workloads", default=",".join(NAMES),
                   help="comma-separated, of " + ", ".join(NAMES))
    p.add_argument("--limit", type=byte_size,
                   help="the --fit limit for every workload (default: chosen per workload from "
                        "preflight's peaks at the two largest --at batches)")
    p.add_argument("--no-device", action="store_true",
                   help="skip the largest batch that fits the whole device (the longest runs)")
    args = p.parse_args()
    args.work = os.path.abspath(args.work)
    args.gpu_basics = os.path.abspath(args.gpu_basics)
    names = [n for n in args.workloads.split(",") if n]
    unknown = [n for n in names if n not in NAMES]
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
    for n in os.listdir(args.work):  # an earlier run's logs would be appended to
        if n.endswith(".preflight.log"):
            os.remove(os.path.join(args.work, n))
    t0 = time.monotonic()
    device = probe(args)
    print(f"{device['name']}, PyTorch {device['torch']} (CUDA {device['cuda']}), "
          f"mem_get_info total {device['mem_get_info_total']} B", flush=True)
    results = []
    for name in names:
        print(f"\n{name}:", flush=True)
        w = validate(args, name, device)
        results.append(w)
        print("\n" + workload_report(w), flush=True)
    ok = all(w["ok"] for w in results)
    total_s = time.monotonic() - t0
    print("\n" + summary(results))
    print(f"{sum(w['ok'] for w in results)} of {len(results)} workloads hold; {total_s:.0f} s "
          "in all")
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump({"device": device, "ok": ok, "seconds": total_s, "workloads": results}, f,
                      indent=2)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
