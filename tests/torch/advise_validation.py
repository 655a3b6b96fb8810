#!/usr/bin/env python3
"""`gpu-basics advise` checked against PyTorch itself, on a GPU.

For each workload (a transformer's training steps; an inference loop whose KV cache grows a token
at a time): record its memory snapshot with PyTorch's own allocator from the first allocation, ask
`gpu-basics advise` for the smallest reserved limit that fits under the defaults and under its
recommendation, then run the same workload in fresh processes with
torch.cuda.set_per_process_memory_fraction at that limit plus 2%, and at the lowest of its
placements' smallest limits (advise bisects one per placement of segments) minus 2%. It must run
at +2% and raise torch.OutOfMemoryError at -2%, for both policies; and the recommendation's real
peak reserved must be within one 2 MiB page of the predicted one.

When a check of a run under a limit or of the recommendation's peak fails, the same child runs
RERUNS more times with PyTorch's memory history on (within RERUN_BUDGET_S in all), and the row
says how many reruns agreed with the prediction and where their traces part: from the recording
in what the workload asked for (then the workload itself changed), or from each other in the
segments PyTorch's allocator took (then the allocator's choices did). Their snapshots stay in the
work directory for `gpu-basics advise` or memory_viz.

    python advise_validation.py run --gpu-basics BUILD/gpu-basics --examples examples --work DIR

Exit 0 when every check holds, 1 when one fails, 77 (skipped) without a GPU.
"""
import argparse
import json
import os
import random
import subprocess
import sys
import time

PAGE = 2 << 20
MARGIN = 0.02
RERUNS = 3
RERUN_BUDGET_S = 300


# ---- the workloads (run in a child process) ------------------------------------------------

def transformer(torch, args, device):
    sys.path.insert(0, args.examples)
    import tiny_transformer as tt

    p = argparse.ArgumentParser()
    tt.add_model_args(p, steps=10, layers=4, d_model=512, heads=8, vocab=8192, batch=8,
                      min_seq=64, max_seq=512)
    margs = p.parse_args([])
    model, opt = tt.build(margs, device)
    loss = None
    for _, _, x, y in tt.batches(margs):
        loss = tt.train_step(model, opt, x.to(device), y.to(device))
    return float(loss.item())


def kv_cache(torch, args, device):
    """Requests of random batch and prompt length; each generated token concatenates onto every
    layer's K and V (a new, slightly larger tensor each time), as a naive decoder does."""
    torch.manual_seed(7)
    rng = random.Random(7)
    layers, d_model, heads, vocab = 8, 1024, 16, 16384
    emb = torch.nn.Embedding(vocab, d_model).to(device, torch.float16)
    proj = [torch.nn.Linear(d_model, 3 * d_model).to(device, torch.float16) for _ in range(layers)]
    head = torch.nn.Linear(d_model, vocab).to(device, torch.float16)
    total = 0.0
    with torch.no_grad():
        for _ in range(6):
            b, t = rng.randint(1, 8), rng.randint(64, 512)
            x = emb(torch.randint(vocab, (b, t), device=device))
            ks, vs = [], []
            for layer in proj:
                q, k, v = layer(x).view(b, t, 3, heads, d_model // heads).unbind(2)
                ks.append(k)
                vs.append(v)
            h = x[:, -1:]
            for _ in range(48):
                for i, layer in enumerate(proj):
                    q, k, v = layer(h).view(b, 1, 3, heads, d_model // heads).unbind(2)
                    ks[i] = torch.cat([ks[i], k], dim=1)
                    vs[i] = torch.cat([vs[i], v], dim=1)
                    att = (q.transpose(1, 2) @ ks[i].permute(0, 2, 3, 1)).softmax(-1)
                    h = h + (att @ vs[i].transpose(1, 2)).transpose(1, 2).reshape(b, 1, d_model)
                h = emb(head(h).argmax(-1))
            total += float(h.float().mean().item())
            del ks, vs, x, h
    return total


WORKLOADS = {"transformer": transformer, "kv_cache": kv_cache}


def child(args) -> int:
    import torch

    device = torch.device("cuda", 0)
    torch.cuda.init()
    if args.limit:
        total = torch.cuda.get_device_properties(device).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, args.limit / total), device)
    if args.record:
        torch.cuda.memory._record_memory_history(enabled="all", context="alloc", stacks="python",
                                                 max_entries=5_000_000)
    out = {"oom": False}
    t0 = time.perf_counter()
    try:
        out["value"] = WORKLOADS[args.workload](torch, args, device)
    except torch.OutOfMemoryError as e:
        out["oom"] = True
        out["message"] = str(e).splitlines()[0][:240]
    torch.cuda.synchronize(device)
    out["seconds"] = time.perf_counter() - t0
    out["max_reserved"] = torch.cuda.max_memory_reserved(device)
    out["max_allocated"] = torch.cuda.max_memory_allocated(device)
    if args.record:
        torch.cuda.memory._dump_snapshot(args.record)
    print("RESULT " + json.dumps(out))
    return 0


# ---- the parent ------------------------------------------------------------------------------

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
    import pickle  # a PyTorch snapshot is a plain pickle of dicts and lists

    with open(path, "rb") as f:
        snap = pickle.load(f)
    traces = snap.get("device_traces", [])
    return traces[device] if device < len(traces) else []


def rerun(args, workload, conf, limit, recording, tag, agrees, deadline=None) -> dict:
    """The failed check's child again, RERUNS times with history: how many reruns agreed with the
    prediction (`agrees(result)`), and where their traces part from the recording's (requests,
    to a rerun's out-of-memory error) and from each other's (segments). A rerun that fails or
    starts after `deadline` (time.monotonic()) is reported, not raised."""
    base = trace_summary(load_trace(recording))
    runs, notes, outcomes = [], [], []
    for k in range(RERUNS):
        if deadline is not None and time.monotonic() > deadline:
            notes.append(f"rerun {k} and later: skipped, the reruns' time budget is spent")
            break
        path = os.path.join(args.work, f"{workload}.{tag}.rerun{k}.pickle")
        try:
            r = run_child(args, workload, conf=conf, limit=limit, record=path)
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

def run_child(args, workload, conf=None, limit=None, record=None) -> dict:
    env = dict(os.environ)
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    if conf:
        env["PYTORCH_CUDA_ALLOC_CONF"] = conf
    cmd = [sys.executable, os.path.abspath(__file__), "child", "--workload", workload,
           "--examples", args.examples]
    if limit:
        cmd += ["--limit", str(int(limit))]
    if record:
        cmd += ["--record", record]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(f"{workload} child failed ({p.returncode}): {p.stderr[-2000:]}")


def validate(args, workload, deadline=None) -> list:
    os.makedirs(args.work, exist_ok=True)
    for name in os.listdir(args.work):  # an earlier run's reruns would pass for this one's
        if name.startswith(f"{workload}.") and ".rerun" in name and name.endswith(".pickle"):
            os.remove(os.path.join(args.work, name))
    snap = os.path.join(args.work, f"{workload}.pickle")
    rec = run_child(args, workload, record=snap)
    if rec["oom"]:
        raise RuntimeError(f"{workload}: out of memory without a limit: {rec['message']}")
    adv_path = os.path.join(args.work, f"{workload}.advice.json")
    t0 = time.perf_counter()
    p = subprocess.run([args.gpu_basics, "advise", snap, "--json", adv_path], capture_output=True,
                       text=True, timeout=600)
    advise_s = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError(f"advise failed ({p.returncode}): {p.stderr}")
    with open(adv_path) as f:
        adv = json.load(f)
    rows = []
    defaults_peak = adv["policies"][0]["peak_reserved_bytes"]
    rows.append({"workload": workload, "check": "defaults: replayed peak = recorded peak",
                 "predicted": defaults_peak, "pytorch": rec["max_reserved"],
                 "ok": defaults_peak == rec["max_reserved"],
                 "detail": f"{adv['trace_events']} trace events, advise {advise_s:.2f} s"})
    policies = [("defaults", adv["defaults"])]
    if adv["recommendation"]["conf"] != "":
        policies.append(("recommended", adv["recommendation"]))
    for who, d in policies:
        # smallest_limit_bytes fits under every placement of segments advise tried; below the
        # lowest placement's smallest limit, none fits.
        conf, smallest = d["conf"], d["smallest_limit_bytes"]
        by = [e["bytes"] for e in d.get("smallest_limit_by_placement", [])] or [smallest]
        span = (f"{min(by) / 2**20:.0f}-{max(by) / 2**20:.0f} MiB over {len(by)} placements"
                if len(by) > 1 else f"{smallest / 2**20:.0f} MiB")
        for sign in (+1, -1):
            base = smallest if sign > 0 else min(by)
            limit = base * (1 + sign * MARGIN)
            r = run_child(args, workload, conf=conf, limit=limit)
            want_oom = sign < 0
            where = "smallest" if sign > 0 else "lowest placement's smallest"
            rows.append({"workload": workload,
                         "check": f"{who} ({conf or 'defaults'}) at {where} {sign * 2:+d}%",
                         "predicted": "OOM" if want_oom else "runs",
                         "pytorch": "OOM" if r["oom"] else "runs",
                         "ok": r["oom"] == want_oom,
                         "detail": f"limit {limit / 2**20:.1f} MiB (smallest {smallest / 2**20:.0f}"
                                   f" MiB; {span}); max reserved "
                                   f"{r['max_reserved'] / 2**20:.1f} MiB"
                                   + (f"; {r['message']}" if r["oom"] else "")})
            if not rows[-1]["ok"]:
                rows[-1]["reruns"] = rerun(args, workload, conf, limit, snap,
                                           f"{who}{sign * 2:+d}pct",
                                           lambda x, w=want_oom: x["oom"] == w, deadline)
    rec_conf = adv["recommendation"]["conf"]
    entry = next(e for e in adv["policies"] if e["conf"] == rec_conf)
    gc = "garbage_collection_threshold" in rec_conf
    r = run_child(args, workload, conf=rec_conf,
                  limit=adv["gc_reserved_limit_bytes"] if gc else None)
    peak_holds = lambda x: (not x["oom"]
                            and abs(entry["peak_reserved_bytes"] - x["max_reserved"]) <= PAGE)
    rows.append({"workload": workload,
                 "check": f"recommended ({rec_conf or 'defaults'}): peak reserved",
                 "predicted": entry["peak_reserved_bytes"], "pytorch": r["max_reserved"],
                 "ok": peak_holds(r),
                 "detail": f"defaults {rec['max_reserved'] / 2**20:.1f} MiB; step value "
                           f"{r.get('value', float('nan')):.4f} vs {rec.get('value', float('nan')):.4f}"})
    if not rows[-1]["ok"]:
        rows[-1]["reruns"] = rerun(args, workload, rec_conf,
                                   adv["gc_reserved_limit_bytes"] if gc else None, snap, "peak",
                                   peak_holds, deadline)
    return rows


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["run", "child"])
    p.add_argument("--gpu-basics")
    p.add_argument("--examples", required=True)
    p.add_argument("--work", default="advise_work")
    p.add_argument("--workload", choices=sorted(WORKLOADS))
    p.add_argument("--limit", type=int)
    p.add_argument("--record")
    p.add_argument("--json")
    args = p.parse_args()
    args.examples = os.path.abspath(args.examples)
    if args.mode == "child":
        return child(args)
    try:
        import torch
        if not torch.cuda.is_available():
            print("skipped: no CUDA device visible to PyTorch")
            return 77
    except ImportError:
        print("skipped: no PyTorch")
        return 77
    rows = []
    deadline = time.monotonic() + RERUN_BUDGET_S  # the reruns' share of ctest's 900 s
    for w in ("transformer", "kv_cache"):
        rows += validate(args, w, deadline)
    fmt = lambda v: f"{v / 2**20:.1f} MiB" if isinstance(v, int) else str(v)
    print("| workload | check | predicted | PyTorch | ok | detail |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['workload']} | {r['check']} | {fmt(r['predicted'])} | {fmt(r['pytorch'])} | "
              f"{'yes' if r['ok'] else 'NO'} | {r['detail']} |")
    for r in rows:
        if "reruns" in r:
            rr = r["reruns"]
            print(f"\n{r['workload']}, {r['check']}: PyTorch again with history: "
                  + ", ".join(rr["outcomes"]) + f"; {rr['agreed']} of {len(rr['outcomes'])} "
                  "agreed with the prediction")
            for note in r["reruns"]["notes"]:
                print(f"- {note}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
