"""The parts of advise_validation.py that need neither PyTorch nor a GPU: reading advise's JSON
(the printed line, what it predicts, the limit it sets), the child's command that runs a printed
line verbatim, the fit limits to ask for, the verdicts, the tables, and the comparison of
snapshot traces that the reruns report. tests/torch/tests/test_advise_checks.py tests them with
plain python3 or pytest."""
import math
import os
import pickle
import shutil

PAGE = 2 << 20  # PyTorch's large-pool segments grow in 2 MiB pages
MIB = 1 << 20
PEAK_TOLERANCE = 0.01  # the measured peak within 1% (or one page) of the prediction
MARGIN = 0.02  # the bisected limits: runs at +2%, out of memory at -2%
ALLOC_ENV = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF",
             "PYTORCH_NO_CUDA_MEMORY_CACHING")


def page_up(n) -> int:
    return int(math.ceil(n / PAGE)) * PAGE


def mib(n) -> str:
    return "-" if n is None else f"{n / MIB:.1f}"


# ---- the printed line, run verbatim ----------------------------------------------------------

def line_script(line: str) -> str:
    """The bash script that runs a printed line as a user pastes it: the line, unmodified, as its
    first statement, then the child in its place (with the environment the line left)."""
    return line + "\n" + 'exec "$@"'


def line_command(line: str, argv: list, bash: str = None) -> list:
    """`bash -c '<line>\\nexec "$@"' _ ARGV...`: argv (the child's own command line) runs after
    the line, in the environment it set."""
    return [bash or shutil.which("bash") or "/bin/bash", "-c", line_script(line), "_"] + list(argv)


def python_shim(python: str, work: str) -> str:
    """A directory whose `python` is `python`: the directory of the interpreter itself when its
    `python` is that interpreter (a virtual environment, conda), else WORK/bin with a two-line
    script that execs it. The line's $(python -c ...) must run the PyTorch that runs the job."""
    own = os.path.join(os.path.dirname(python), "python")
    try:
        if os.path.exists(own) and os.path.samefile(own, python):
            return os.path.dirname(python)
    except OSError:
        pass
    d = os.path.join(work, "bin")
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "python")
    with open(path, "w") as f:
        f.write(f'#!/bin/sh\nexec "{python}" "$@"\n')
    os.chmod(path, 0o755)
    return d


def line_env(base: dict, python_dir: str) -> dict:
    """The child's environment before the line runs: the caller's, without any allocator setting
    (the line alone sets PyTorch's allocator), with python_dir first on PATH."""
    env = {k: v for k, v in base.items() if k not in ALLOC_ENV}
    env["PATH"] = python_dir + (os.pathsep + base["PATH"] if base.get("PATH") else "")
    return env


def shorten_line(line: str, width: int = 80) -> str:
    """The line for a table cell: the $(python -c '...') that computes a fraction as
    $(python -c …), and, past `width`, its middle left out (head and tail kept)."""
    start = line.find("$(python -c '")
    if start >= 0:
        end = line.find("')", start + 13)
        if end >= 0:
            line = line[:start] + "$(python -c …)" + line[end + 2:]
    if len(line) <= width:
        return line
    tail = min(24, width // 3)
    return line[:width - tail - 1] + "…" + line[len(line) - tail:]


# ---- what the advice says --------------------------------------------------------------------

def recommended_index(adv: dict) -> int:
    conf = adv["recommended"]["conf"]
    for i, p in enumerate(adv["policies"]):
        if p["conf"] == conf:
            return i
    raise ValueError(f"the recommended conf {conf!r} is not among the policies")


def predicted_peak(adv: dict):
    """The peak reserved the printed line claims: the recommended policy's own peak where the
    line sets no limit, else its peak under the fit limit the line's fraction sets (the
    page-aligned one). None where the advice has no figure (a replay that failed)."""
    p = adv["policies"][recommended_index(adv)]
    limit = adv.get("line_limit_bytes")
    if limit is None:
        return p.get("peak_reserved_bytes")
    fits = sorted(p["fits"], key=lambda f: f["limit_bytes"])
    for f in fits:
        if f["limit_bytes"] // PAGE * PAGE == limit:
            return f["peak_reserved_bytes"]
    for f in fits:  # the fit limit just above the line's
        if f["limit_bytes"] >= limit:
            return f["peak_reserved_bytes"]
    return None


def placement_range(detail: dict, fallback):
    """(least, most) peak reserved over advise's placements of segments of a detailed policy
    (the defaults, the recommendation); (fallback, fallback) where the advice has none."""
    by = [e["bytes"] for e in detail.get("peak_reserved_by_placement", [])]
    return (min(by), max(by)) if by else (fallback, fallback)


def predicted_range(adv: dict):
    """The peak reserved the printed line claims, as a range: without a line limit, the
    recommendation's peaks over the placements of segments (where the driver puts segments moves
    the peak; PyTorch's run is one of them); with one, the single figure predicted_peak gives."""
    p = predicted_peak(adv)
    if p is None or adv.get("line_limit_bytes") is not None:
        return (p, p)
    lo, hi = placement_range(adv["recommendation"], p)
    return (min(lo, p), max(hi, p))


def line_of(adv: dict) -> str:
    return adv["recommended"]["torch_env"]


def line_problems(adv: dict) -> list:
    """What the printed line gets wrong by its own advice (failures): a line limit without a
    fraction in the line."""
    line = line_of(adv)
    if adv.get("line_limit_bytes") is not None and "per_process_memory_fraction:" not in line:
        return [f"the advice sets a limit of {mib(adv['line_limit_bytes'])} MiB but the line "
                "carries no per_process_memory_fraction"]
    if not (line.startswith("unset PYTORCH_CUDA_ALLOC_CONF")
            or line.startswith("export PYTORCH_CUDA_ALLOC_CONF=")):
        return ["the line neither unsets nor exports PYTORCH_CUDA_ALLOC_CONF"]
    return []


def line_form_notes(adv: dict, device_memory_given: bool) -> list:
    """How the line's fraction is written against the form the row means to try (notes)."""
    line, notes = line_of(adv), []
    has_fraction = "per_process_memory_fraction:" in line
    shell = "$(python -c" in line
    if not has_fraction:
        notes.append("the line carries no fraction")
    elif device_memory_given and shell:
        notes.append("device memory was given, yet the line computes the fraction in the shell")
    elif not device_memory_given and not shell:
        notes.append("no device memory was given, yet the fraction is a number")
    return notes


def fit_limit(adv: dict) -> tuple:
    """A --fit limit between the live peak and the defaults' peak, that the defaults fit (so the
    simplest policy that fits it is the defaults) and that their peak without a limit passes (so
    the printed line must carry a fraction): their smallest limit +2%, rounded up to a page.
    (limit, note): note says why the limit could not be put below their peak."""
    smallest = adv["defaults"]["smallest_limit_bytes"]
    peak = adv["policies"][0].get("peak_reserved_bytes") or 0
    limit = page_up(smallest * (1 + MARGIN))
    if limit < peak:
        return limit, ""
    if page_up(smallest) + PAGE < peak:
        return page_up(smallest) + PAGE, ""
    return limit, (f"the defaults' peak {mib(peak)} MiB is within a page or 2% of their smallest "
                   f"limit {mib(smallest)} MiB: no limit between them, the line may need no "
                   "fraction")


def tight_limit(adv: dict):
    """A --fit limit below the defaults' smallest limit that the recommendation (of advice without
    --fit) fits: its smallest limit +2% rounded up to a page; None where there is no such limit
    (the recommendation is the defaults, or within 2% of them)."""
    rec = adv["recommendation"]
    if rec["conf"] == "":
        return None
    limit = page_up(rec["smallest_limit_bytes"] * (1 + MARGIN))
    return limit if limit < adv["defaults"]["smallest_limit_bytes"] else None


# ---- verdicts --------------------------------------------------------------------------------

def diff_percent(predicted, measured):
    if not predicted or measured is None:
        return None
    return 100.0 * (measured - predicted) / predicted


def peak_close(predicted, measured) -> bool:
    """measured within 1% (or a page) of predicted: a figure, or a (least, most) range."""
    if predicted is None or measured is None:
        return False
    lo, hi = predicted if isinstance(predicted, tuple) else (predicted, predicted)
    if lo is None or hi is None:
        return False
    return lo - max(PEAK_TOLERANCE * lo, PAGE) <= measured <= hi + max(PEAK_TOLERANCE * hi, PAGE)


def range_text(r) -> str:
    lo, hi = r
    return f"{mib(lo)} MiB" if lo == hi else f"{mib(lo)}-{mib(hi)} MiB"


def no_fit_problems(r: dict, predicted, defaults_predicted, defaults_measured) -> list:
    """Advice without --fit, its line run as printed: no OOM, peak reserved within 1% (or a page)
    of the prediction (the range over placements), and not above the defaults' measured peak
    where it claims to be lower under every placement (else not above the defaults' worst
    placement). predicted and defaults_predicted are (least, most) ranges."""
    out = []
    measured = r.get("max_reserved")
    if r.get("oom"):
        out.append("out of memory: " + r.get("message", ""))
    if predicted is None or predicted[0] is None:
        out.append("the advice has no peak for its recommendation")
    elif not peak_close(predicted, measured):
        out.append(f"peak {mib(measured)} MiB is outside the predicted {range_text(predicted)} "
                   f"(tolerance 1% or one 2 MiB page)")
    if (predicted is not None and predicted[1] is not None and defaults_predicted is not None
            and defaults_predicted[0] is not None and measured is not None):
        if predicted[1] < defaults_predicted[0]:  # less under every placement
            if measured > defaults_measured:
                out.append(f"peak {mib(measured)} MiB above the defaults' measured "
                           f"{mib(defaults_measured)} MiB, though predicted lower under every "
                           "placement")
        elif predicted[1] < defaults_predicted[1] and not peak_close(
                (0, defaults_predicted[1]), measured):
            out.append(f"peak {mib(measured)} MiB above the defaults' worst placement "
                       f"{mib(defaults_predicted[1])} MiB")
    return out


def fit_problems(r: dict, limit: int) -> list:
    """Advice with --fit L, its line run as printed: no OOM and peak reserved at most L."""
    out = []
    if r.get("oom"):
        out.append("out of memory: " + r.get("message", ""))
    if r.get("max_reserved", 0) > limit:
        out.append(f"peak {mib(r.get('max_reserved'))} MiB above the limit {mib(limit)} MiB")
    return out


# ---- tables ----------------------------------------------------------------------------------

LINE_COLUMNS = ("check", "printed line", "predicted MiB", "measured MiB", "diff %", "limit MiB",
                "OOM?", "verdict")


def line_cells(row: dict) -> list:
    diff = row.get("diff_percent")
    oom = row.get("oom")
    pred = row.get("predicted")
    if isinstance(pred, (tuple, list)):
        pred = mib(pred[0]) if pred[0] == pred[1] else f"{mib(pred[0])}-{mib(pred[1])}"
    else:
        pred = mib(pred)
    return [row["check"], "`" + shorten_line(row.get("line", "")) + "`", pred,
            mib(row.get("measured")), "-" if diff is None else f"{diff:+.2f}",
            mib(row.get("limit")), "-" if oom is None else ("OOM" if oom else "no"),
            "holds" if row["ok"] else "FAILS: " + "; ".join(row.get("problems", []))]


def markdown(columns, rows) -> str:
    esc = lambda c: str(c).replace("|", "\\|")
    out = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    out += ["| " + " | ".join(esc(c) for c in cells) + " |" for cells in rows]
    return "\n".join(out)


def workload_report(w: dict) -> str:
    """The tables of one workload: the printed lines run verbatim, then the limit claims."""
    out = [f"### {w['workload']}" + (f" ({w['seconds']:.0f} s)" if "seconds" in w else "")]
    if w.get("error"):
        out.append(f"FAILED: {w['error']}")
    if w.get("rows"):
        out += ["", markdown(LINE_COLUMNS, [line_cells(r) for r in w["rows"]]), ""]
        out += [f"- {r['check']}: `{r.get('line', '')}`" + (f" (PYTORCH_CUDA_ALLOC_CONF in the "
                f"child: {r['env_seen']!r})" if r.get("env_seen") else "")
                + "".join(f"; note: {n}" for n in r.get("notes", [])) for r in w["rows"]]
    if w.get("claims"):
        out += ["", markdown(("check", "predicted", "PyTorch", "ok", "detail"),
                             [[c["check"], fmt_claim(c["predicted"]), fmt_claim(c["pytorch"]),
                               "yes" if c["ok"] else "NO", c["detail"]] for c in w["claims"]])]
    for n in w.get("notes", []):
        out.append(f"- note: {n}")
    for r in list(w.get("rows", [])) + list(w.get("claims", [])):
        if "reruns" in r:
            rr = r["reruns"]
            out.append(f"\n{w['workload']}, {r['check']}: PyTorch again with history: "
                       + ", ".join(rr["outcomes"]) + f"; {rr['agreed']} of "
                       f"{len(rr['outcomes'])} agreed with the prediction")
            out += [f"- {note}" for note in rr["notes"]]
    return "\n".join(out)


def fmt_claim(v) -> str:
    return f"{v / MIB:.1f} MiB" if isinstance(v, int) and not isinstance(v, bool) else str(v)


# ---- snapshot traces, for the reruns ---------------------------------------------------------

def trace_summary(trace) -> dict:
    """What a snapshot's trace (one device's list of TraceEntry dicts) says of one run: the
    workload's requests in order (to its first out-of-memory error), the allocator's segment
    events in order, and how many segments were placed in address ranges that an earlier
    segment_free or segment_unmap had released (reused addresses)."""
    requests = []
    for e in trace:  # up to an out-of-memory error: after it the workload unwinds, not asks
        if e["action"] == "oom":
            break
        if e["action"] in ("alloc", "free_requested"):
            requests.append((e["action"], e["size"]))
    segments = [(e["action"], e["size"]) for e in trace
                if e["action"] in ("segment_alloc", "segment_free", "segment_map", "segment_unmap")]
    released, reused = [], 0
    for e in trace:
        if e["action"] in ("segment_free", "segment_unmap"):
            released.append((e["addr"], e["addr"] + e["size"]))
        elif e["action"] in ("segment_alloc", "segment_map"):
            lo, hi = e["addr"], e["addr"] + e["size"]
            if any(lo < r_hi and r_lo < hi for r_lo, r_hi in released):
                reused += 1
    # Where the driver put each new segment (to the first out-of-memory error): above ("+"),
    # below ("-") or at ("=") the one before it. The allocator breaks ties between free blocks
    # of one size by address, so the same requests under different placements can split
    # different blocks. Expandable segments' mappings grow one reserved range: not counted.
    starts = []
    for e in trace:
        if e["action"] == "oom":
            break
        if e["action"] == "segment_alloc":
            starts.append(e["addr"])
    placement = "".join("+" if b > a else "-" if b < a else "="
                        for a, b in zip(starts, starts[1:]))
    return {"requests": requests, "segments": segments, "reused_addresses": reused,
            "placement": placement, "oom": any(e["action"] == "oom" for e in trace)}


def describe_placement(a: str, b: str, a_name: str, b_name: str) -> str:
    """Whether two runs' segments went up and down alike ("+" above the one before, "-" below)."""
    i = first_difference(list(a), list(b))
    ups = lambda p: f"{p.count('+')} of {len(p)} above the one before"
    if i is None:
        return f"placements: the same ({ups(a)})"
    return (f"placements: part at segment #{i + 1} ({a_name}: {ups(a)}; {b_name}: {ups(b)})")


def first_difference(a: list, b: list):
    """The first index where two sequences differ, or where the shorter one ends; None if equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def describe_difference(what: str, a: list, b: list, a_name: str, b_name: str) -> str:
    i = first_difference(a, b)
    if i is None:
        return f"{what}: the same {len(a)}"
    show = lambda seq: f"{seq[i][0]} {seq[i][1]} B" if i < len(seq) else "the end"
    return f"{what}: part at #{i} ({a_name}: {show(a)}; {b_name}: {show(b)})"


def load_trace(path: str, device: int = 0) -> list:
    with open(path, "rb") as f:  # a PyTorch snapshot is a plain pickle of dicts and lists
        snap = pickle.load(f)
    traces = snap.get("device_traces", [])
    return traces[device] if device < len(traces) else []
