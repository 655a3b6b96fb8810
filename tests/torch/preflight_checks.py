"""The parts of preflight_validation.py that need neither PyTorch nor a GPU: the workloads' batches,
the commands of the children and of `gpu-basics preflight`, preflight's JSON read back (and its
refusals), the limit to ask --fit for, the fraction that sets it, the batch above the largest, the
verdicts and the tables. tests/torch/tests/test_preflight_checks.py tests them with plain python3
or pytest."""
import json
import math

MIB = 1 << 20
GIB = 1 << 30
PAGE = 2 << 20  # PyTorch's large-pool segments grow in 2 MiB pages
TOLERANCE_PERCENT = 3.0  # measured peak reserved within 3% of the prediction
STEPS = 3  # training steps per run: the first allocates the optimizer's state
# Every allocator setting PyTorch reads: none may reach a child but the one the harness sets.
ALLOC_ENV = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF",
             "PYTORCH_NO_CUDA_MEMORY_CACHING")
# The batches each workload is recorded at and predicted at (--at). The predicted largest batch is
# run too; one beyond LARGEST_RUN_FACTOR times the largest --at batch is not (time), and fails.
# Recorded at 4, 8 and 16, not at 2: at batch 2 PyTorch chose other kernels for some layers (an
# embedding MLP's backward buffer of 128 MiB, 132 MiB from batch 4 on).
SPECS = {
    "transformer": {"record": (4, 8, 16), "at": (32, 64, 128)},
    "cnn": {"record": (4, 8, 16), "at": (32, 64, 128)},
    "mlp_embedding": {"record": (4, 8, 16), "at": (32, 64, 128)},
}
NAMES = tuple(SPECS)
LARGEST_RUN_FACTOR = 8
# What a job holds on the device outside PyTorch's allocator: kept out of the device's limit.
DEVICE_RESERVE = 2 * (1 << 30)


def mib(n) -> str:
    return "-" if n is None else f"{n / MIB:.1f}"


def page_down(n) -> int:
    return int(n) // PAGE * PAGE


# ---- commands --------------------------------------------------------------------------------

def child_command(python: str, script: str, workload: str, batch: int, out: str,
                  steps: int = STEPS, record: str = None, fraction: float = None) -> list:
    """preflight_workloads.py WORKLOAD --batch B --steps N [--record S] [--fraction F] --json OUT.
    The fraction is written as repr() writes it: read back, it is the same double."""
    cmd = [python, script, workload, "--batch", str(int(batch)), "--steps", str(int(steps))]
    if record:
        cmd += ["--record", record]
    if fraction is not None:
        cmd += ["--fraction", repr(float(fraction))]
    return cmd + ["--json", out]


def child_env(base: dict, conf: str = None) -> dict:
    """The child's environment: the caller's without any allocator setting, and with `conf` as
    PYTORCH_CUDA_ALLOC_CONF where one is given (a policy preflight recommends), exactly."""
    env = {k: v for k, v in base.items() if k not in ALLOC_ENV}
    if conf:
        env["PYTORCH_CUDA_ALLOC_CONF"] = conf
    return env


def preflight_command(gpu_basics: str, snapshots: list, batches, at=(), fit: int = None) -> list:
    """gpu-basics preflight S1 S2 S3 --batches 2,4,8 [--at B]... [--fit BYTES] --json -"""
    if len(snapshots) != len(batches):
        raise ValueError("one batch per recording")
    cmd = [gpu_basics, "preflight", *snapshots, "--batches", ",".join(str(int(b)) for b in batches)]
    for b in at:
        cmd += ["--at", str(int(b))]
    if fit is not None:
        cmd += ["--fit", str(int(fit))]
    return cmd + ["--json", "-"]


def fraction_for(limit: int, total: int) -> float:
    """The fraction F for set_per_process_memory_fraction that caps reserved memory at exactly
    `limit` bytes: PyTorch allows static_cast<size_t>(F * total) bytes, and a cap one byte short
    refuses a segment that ends exactly at a page-aligned limit. The smallest double F with
    floor(F * total) >= limit."""
    if total <= 0 or limit <= 0 or limit > total:
        raise ValueError(f"a limit of {limit} B on a device of {total} B")
    f = limit / total
    while math.floor(f * total) < limit:
        f = math.nextafter(f, 2.0)
    while f > 0 and math.floor(math.nextafter(f, 0.0) * total) >= limit:
        f = math.nextafter(f, 0.0)
    return min(f, 1.0)


# ---- preflight's answer ----------------------------------------------------------------------

class PreflightFailed(Exception):
    """preflight did not answer: a refusal (exit 2, its one line) or another failure."""

    def __init__(self, returncode: int, message: str, command: list = None):
        self.returncode, self.message, self.command = returncode, message, command
        what = "refused (exit 2)" if returncode == 2 else f"failed (exit {returncode})"
        super().__init__(f"preflight {what}: {message}")


def parse_preflight(returncode: int, stdout: str, stderr: str, command: list = None) -> dict:
    """preflight's JSON (`--json -`), or PreflightFailed carrying its message: exit 2 is a refusal
    (recordings that cannot be aligned or modelled, bad input), named as such; any other non-zero
    exit, or output that is not preflight's JSON, is a failure too."""
    if returncode != 0:
        lines = [ln for ln in (stderr or "").strip().splitlines() if ln.strip()]
        lines = lines or [ln for ln in (stdout or "").strip().splitlines() if ln.strip()]
        raise PreflightFailed(returncode, "\n".join(lines[-5:]) or "(no message)", command)
    try:
        pf = json.loads(stdout)
    except ValueError as e:
        raise PreflightFailed(returncode, f"its output is not JSON ({e}): {stdout[:300]!r}",
                              command) from None
    if not isinstance(pf, dict) or not isinstance(pf.get("predictions"), list):
        raise PreflightFailed(returncode, "its JSON has no list of predictions", command)
    return pf


def prediction(pf: dict, batch: int, which: str = "defaults"):
    """The prediction of `which` ("defaults" or "recommended") at `batch`, or None."""
    for p in pf.get("predictions", []):
        if p.get("batch") == batch and p.get("which", "defaults") == which:
            return p
    return None


def missing_predictions(pf: dict, batches, which: str = "defaults") -> list:
    return [b for b in batches if prediction(pf, b, which) is None]


def merged_predictions(*pfs) -> dict:
    """One preflight answer's predictions over several calls (the first call's where two have the
    same batch and policy)."""
    out, seen = [], set()
    for pf in pfs:
        for p in (pf or {}).get("predictions", []):
            key = (p.get("batch"), p.get("which", "defaults"))
            if key not in seen:
                seen.add(key)
                out.append(p)
    return {"predictions": out}


def largest_batch(pf: dict, which: str = "defaults"):
    """largest_batch[which] of an answer with --fit: a batch, 0 (none fits) or None (every batch
    fits). KeyError where the answer has no largest_batch."""
    lb = pf["largest_batch"]
    if which not in lb:
        raise KeyError(f"largest_batch has no {which!r}")
    return lb[which]


def step_above(largest):
    """The batch to run out of memory at: largest + 1. preflight's search ends where the batch it
    found to fit and the one found not to are one apart (bisection down to one batch), so the
    batch above is predicted not to fit. With 0 (no batch fits): 1. None (every batch fits): None.
    """
    if largest is None:
        return None
    if largest < 0:
        raise ValueError(f"a largest batch of {largest}")
    return int(largest) + 1


def device_limit(free: int) -> int:
    """The --fit limit for "the largest batch that fits the device": the memory a fresh process
    had free once its CUDA context was made (the probe's), less DEVICE_RESERVE for what a job holds
    outside PyTorch's allocator (cuDNN's and cuBLAS's handles, kernels loaded on first use), to a
    page."""
    if free <= DEVICE_RESERVE:
        raise ValueError(f"{free} B free on the device, not more than the {DEVICE_RESERVE} B kept")
    return page_down(free - DEVICE_RESERVE)


def choose_limit(pf: dict, at, device_total: int = None):
    """The --fit limit: halfway between the defaults' predicted peaks reserved at the two largest
    --at batches, rounded down to a page, so that the largest batch that fits lies between them (a
    moderate batch, quick to run). Where they are the same (a peak that does not grow there), that
    peak: the largest batch is where the growing part passes it. Kept below 90% of the device.
    Returns (limit, note)."""
    at = sorted(at)
    if len(at) < 2:
        raise ValueError("two --at batches are needed to choose a limit")
    miss = missing_predictions(pf, at[-2:])
    if miss:
        raise ValueError(f"no prediction (defaults) at batch {', '.join(map(str, miss))}")
    lo = prediction(pf, at[-2])["peak_reserved_bytes"]
    hi = prediction(pf, at[-1])["peak_reserved_bytes"]
    limit = page_down((lo + hi) // 2)
    note = (f"--fit {mib(limit)} MiB: halfway between the defaults' predicted peaks at batch "
            f"{at[-2]} ({mib(lo)} MiB) and {at[-1]} ({mib(hi)} MiB)")
    if hi <= lo:
        limit = page_down(max(lo, hi))
        note = (f"--fit {mib(limit)} MiB: the defaults' predicted peak at batch {at[-2]} and "
                f"{at[-1]} ({mib(lo)}, {mib(hi)} MiB; the peak does not grow there)")
    if device_total and limit > 0.9 * device_total:
        limit = page_down(0.9 * device_total)
        note += f"; capped at 90% of the device, {mib(limit)} MiB"
    return limit, note


def margin_notes(pf: dict, largest, above, limit: int) -> list:
    """How far the defaults' predicted peaks (without a limit) at the largest batch and the one
    above lie from the limit: a fit verdict that fails by a batch is judged against them. The batch
    above must be predicted beyond the limit (a replay within it fits under it too)."""
    out = []
    lo, hi = prediction(pf, largest) if largest else None, prediction(pf, above) if above else None
    if lo:
        d = lo["peak_reserved_bytes"] - limit
        out.append(f"predicted peak at the largest batch {largest}: "
                   f"{mib(lo['peak_reserved_bytes'])} MiB, {mib(abs(d))} MiB "
                   f"{'above' if d > 0 else 'within'} the limit"
                   + (" (it fits by freeing the cache)" if d > 0 else ""))
    if hi:
        d = hi["peak_reserved_bytes"] - limit
        out.append(f"predicted peak at batch {above}: {mib(hi['peak_reserved_bytes'])} MiB, "
                   f"{mib(abs(d))} MiB {'above' if d > 0 else 'within'} the limit"
                   + ("" if d > 0 else " (yet preflight says it does not fit: inconsistent)"))
    return out


# ---- verdicts --------------------------------------------------------------------------------

def diff_percent(predicted, measured):
    """100 * (measured - predicted) / predicted, signed (+: PyTorch used more than predicted)."""
    if not predicted or measured is None:
        return None
    return 100.0 * (measured - predicted) / predicted


def within_tolerance(predicted, measured, percent: float = TOLERANCE_PERCENT) -> bool:
    d = diff_percent(predicted, measured)
    return d is not None and abs(d) <= percent + 1e-9


def peak_row(batch: int, role: str, pred, result, check: bool = True) -> dict:
    """A measured run at `batch` (no fraction, PyTorch's defaults) against preflight's defaults
    prediction `pred` (a prediction dict or None). With check=False the row is information (the
    recorded batches: preflight replays them as recorded)."""
    row = {"batch": batch, "role": role, "check": check, "problems": [],
           "predicted_reserved": pred and pred.get("peak_reserved_bytes"),
           "predicted_allocated": pred and pred.get("peak_allocated_bytes")}
    if result is not None:
        row.update(measured_reserved=result.get("max_reserved"),
                   measured_allocated=result.get("max_allocated"), oom=result.get("oom"),
                   seconds=result.get("seconds"))
    row["diff_percent"] = diff_percent(row["predicted_reserved"], row.get("measured_reserved"))
    row["allocated_diff_percent"] = diff_percent(row["predicted_allocated"],
                                                 row.get("measured_allocated"))
    if pred is None:
        row["problems"].append(f"preflight's JSON has no prediction (defaults) at batch {batch}")
    if result is None:
        row["problems"].append("not run")
    elif result.get("oom"):
        row["problems"].append("out of memory without a limit: " + result.get("message", ""))
    elif pred is not None and not within_tolerance(row["predicted_reserved"],
                                                   row["measured_reserved"]):
        row["problems"].append(f"measured {mib(row['measured_reserved'])} MiB is "
                               f"{row['diff_percent']:+.2f}% off the predicted "
                               f"{mib(row['predicted_reserved'])} MiB (tolerance "
                               f"{TOLERANCE_PERCENT:g}%)")
    row["ok"] = (not row["problems"]) if check else None
    return row


def fit_row(check: str, batch: int, limit: int, want_oom: bool, result, pred=None,
            conf: str = "", is_check: bool = True) -> dict:
    """A run at `batch` under the fraction that caps reserved memory at `limit`: it must run (the
    largest batch preflight says fits) or raise torch.OutOfMemoryError (the batch above)."""
    row = {"check": check, "batch": batch, "limit": limit, "conf": conf,
           "expected": "OOM" if want_oom else "runs", "is_check": is_check, "problems": [],
           "predicted_reserved": pred and pred.get("peak_reserved_bytes")}
    if result is None:
        row.update(pytorch=None, measured_reserved=None)
        row["problems"].append("not run")
    else:
        row.update(pytorch="OOM" if result.get("oom") else "runs",
                   measured_reserved=result.get("max_reserved"),
                   effective_limit=result.get("limit_bytes"), message=result.get("message"),
                   conf_seen=result.get("conf_seen"))
        if row["pytorch"] != row["expected"]:
            row["problems"].append(f"expected {row['expected']}, PyTorch {row['pytorch']}"
                                   + (f": {result.get('message')}" if result.get("oom") else ""))
        if (result.get("limit_bytes") is not None and result["limit_bytes"] < limit):
            row["problems"].append(f"the fraction capped the child at {result['limit_bytes']} B, "
                                   f"below the limit {limit} B")
        if (conf or None) != result.get("conf_seen"):
            row["problems"].append(f"the child saw PYTORCH_CUDA_ALLOC_CONF="
                                   f"{result.get('conf_seen')!r}, not {conf or None!r}")
    row["ok"] = not row["problems"] if is_check else None
    return row


def workload_ok(w: dict) -> bool:
    return ("error" not in w and bool(w.get("rows"))
            and all(r["ok"] for r in w.get("rows", []) if r["check"])
            and all(r["ok"] for r in w.get("fit", []) if r["is_check"]))


# ---- tables ----------------------------------------------------------------------------------

PEAK_COLUMNS = ("batch", "run", "predicted reserved MiB", "measured reserved MiB", "diff %",
                "predicted allocated MiB", "measured allocated MiB", "verdict")
FIT_COLUMNS = ("check", "batch", "limit MiB", "predicted", "PyTorch", "measured reserved MiB",
               "predicted reserved MiB (no limit)", "verdict")


def verdict(ok, problems) -> str:
    if ok is None:
        return "info" + (": " + "; ".join(problems) if problems else "")
    return "holds" if ok else "FAILS: " + "; ".join(problems)


def pct(d) -> str:
    return "-" if d is None else f"{d:+.2f}"


def peak_cells(r: dict) -> list:
    return [r["batch"], r["role"], mib(r["predicted_reserved"]), mib(r.get("measured_reserved")),
            pct(r["diff_percent"]), mib(r["predicted_allocated"]),
            mib(r.get("measured_allocated")), verdict(r["ok"], r["problems"])]


def fit_cells(r: dict) -> list:
    return [r["check"], r["batch"], mib(r["limit"]), r["expected"], r.get("pytorch") or "-",
            mib(r.get("measured_reserved")), mib(r.get("predicted_reserved")),
            verdict(r["ok"], r["problems"])]


def markdown(columns, rows) -> str:
    esc = lambda c: str(c).replace("|", "\\|").replace("\n", " ")
    out = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    out += ["| " + " | ".join(esc(c) for c in cells) + " |" for cells in rows]
    return "\n".join(out)


def call_line(c: dict) -> str:
    own = c.get("seconds_reported")
    return (f"- preflight ({c['purpose']}): {c['wall_seconds']:.2f} s wall"
            + (f", {own:.2f} s by its own count" if own is not None else "")
            + f"; exit {c['returncode']}: `{' '.join(c['args'])}`")


def workload_report(w: dict) -> str:
    """One workload's tables: the preflight calls (timed), the peaks against PyTorch's, the fit
    verdicts, the notes."""
    out = [f"### {w['workload']}" + (f" ({w['seconds']:.0f} s)" if "seconds" in w else "")
           + (": holds" if w.get("ok") else ": FAILS" if "ok" in w else "")]
    out += [call_line(c) for c in w.get("preflight", [])]
    if w.get("limit") is not None:
        lb = w.get("largest_batch") or {}
        out.append(f"- limit {mib(w['limit'])} MiB; largest batch that fits: defaults "
                   f"{lb.get('defaults')}, recommended {lb.get('recommended')} "
                   f"({lb.get('policy') or 'the defaults'}), monotone {lb.get('monotone')}")
    if w.get("error"):
        out.append(f"\nFAILED: {w['error']}")
    if w.get("rows"):
        out += ["", markdown(PEAK_COLUMNS, [peak_cells(r) for r in w["rows"]]),
                f"diff %: 100 * (measured - predicted) / predicted, peak reserved, PyTorch's "
                f"defaults, no limit; within {TOLERANCE_PERCENT:g}% holds"]
    if w.get("fit"):
        out += ["", markdown(FIT_COLUMNS, [fit_cells(r) for r in w["fit"]])]
    out += [f"- note: {n}" for n in w.get("notes", [])]
    return "\n".join(out)


def summary(results: list) -> str:
    """A line per workload: its checks held or not, and the slowest preflight call."""
    out = []
    for w in results:
        checks = [r for r in w.get("rows", []) if r["check"]] + \
                 [r for r in w.get("fit", []) if r["is_check"]]
        held = sum(1 for r in checks if r["ok"])
        calls = w.get("preflight", [])
        slow = max((c["wall_seconds"] for c in calls), default=None)
        out.append(f"{w['workload']}: {held} of {len(checks)} checks hold"
                   + (f", error: {w['error'].splitlines()[0]}" if w.get("error") else "")
                   + (f"; preflight at most {slow:.2f} s a call" if slow is not None else ""))
    return "\n".join(out)
