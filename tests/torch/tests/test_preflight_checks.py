"""preflight_validation.py's parts that need neither PyTorch nor a GPU: the verdicts (3%), the
fraction that caps reserved memory at the limit, the batch above the largest, the limit chosen,
preflight's JSON and refusals read back, the children's commands and environment, the tables;
and the harness's flow end to end with a stand-in child and a stand-in gpu-basics (a job of
C + S * batch bytes). Runs under pytest or alone:
    python3 tests/torch/tests/test_preflight_checks.py
"""
import argparse
import importlib.util
import json
import math
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
import preflight_checks as pc  # noqa: E402
import preflight_validation as pv  # noqa: E402

MIB, GIB = 1 << 20, 1 << 30
H100_TOTAL = 85017231360  # torch.cuda.mem_get_info()[1] of an H100 80GB HBM3
H200_TOTAL = 150109880320


def pred(batch, reserved, which="defaults", allocated=None, policy=""):
    return {"batch": batch, "which": which, "policy": policy,
            "peak_allocated_bytes": allocated if allocated is not None else reserved - MIB,
            "peak_reserved_bytes": reserved}


# ---- the 3% verdict --------------------------------------------------------------------------

def test_within_three_percent_holds_and_beyond_fails_either_way():
    p = 1000 * MIB
    assert pc.within_tolerance(p, p)
    assert pc.within_tolerance(p, int(p * 1.029))
    assert pc.within_tolerance(p, int(p * 0.971))
    assert pc.within_tolerance(p, p * 103 // 100)  # exactly 3%
    assert not pc.within_tolerance(p, int(p * 1.031))
    assert not pc.within_tolerance(p, int(p * 0.969))
    assert not pc.within_tolerance(None, p) and not pc.within_tolerance(p, None)
    assert not pc.within_tolerance(0, p)
    assert math.isclose(pc.diff_percent(p, int(p * 1.031)), 3.1, abs_tol=1e-6)
    assert pc.diff_percent(p, int(p * 0.97)) < 0  # signed: PyTorch used less


def test_a_peak_row_fails_beyond_three_percent_and_holds_within():
    p = pred(32, 2000 * MIB)
    bad = pc.peak_row(32, "--at", p, {"max_reserved": int(2000 * MIB * 1.031),
                                      "max_allocated": 1900 * MIB, "oom": False})
    assert bad["ok"] is False and "+3.10%" in bad["problems"][0]
    good = pc.peak_row(32, "--at", p, {"max_reserved": int(2000 * MIB * 1.029),
                                       "max_allocated": 1900 * MIB, "oom": False})
    assert good["ok"] is True and good["problems"] == []
    assert math.isclose(good["diff_percent"], 2.9, abs_tol=1e-4)


def test_a_missing_prediction_an_oom_and_a_run_never_made_are_failures():
    r = {"max_reserved": 10 * MIB, "max_allocated": 9 * MIB, "oom": False}
    row = pc.peak_row(48, "largest (defaults)", None, r)
    assert row["ok"] is False and "no prediction (defaults) at batch 48" in row["problems"][0]
    pf = {"predictions": [pred(16, MIB), pred(16, MIB, "recommended")]}
    assert pc.missing_predictions(pf, [16, 32, 64]) == [32, 64]
    assert pc.prediction(pf, 16, "recommended")["which"] == "recommended"
    assert pc.prediction(pf, 32) is None
    oom = pc.peak_row(16, "--at", pred(16, MIB), {"oom": True, "message": "CUDA out of memory",
                                                  "max_reserved": MIB, "max_allocated": MIB})
    assert oom["ok"] is False and "out of memory" in oom["problems"][0]
    assert pc.peak_row(16, "--at", pred(16, MIB), None)["ok"] is False
    info = pc.peak_row(2, "recorded", None, r, check=False)
    assert info["ok"] is None  # information: never fails the workload


# ---- preflight's answer ----------------------------------------------------------------------

def test_exit_2_is_a_refusal_carrying_preflights_message():
    msg = ("gpu-basics: b8.pickle: the size of alloc #12 is not affine in the batch: 1024 B at "
           "batch 2, 4096 B at batch 4, 8192 B at batch 8")
    try:
        pc.parse_preflight(2, "", msg + "\n", ["gpu-basics", "preflight"])
    except pc.PreflightFailed as e:
        assert e.returncode == 2 and e.message == msg
        assert str(e).startswith("preflight refused (exit 2): ") and "not affine" in str(e)
    else:
        raise AssertionError("exit 2 must raise")
    try:
        pc.parse_preflight(1, "", "", None)
    except pc.PreflightFailed as e:
        assert "failed (exit 1)" in str(e) and "(no message)" in str(e)
    for bad in ("not json", json.dumps({"files": []}), json.dumps([1, 2])):
        try:
            pc.parse_preflight(0, bad, "")
        except pc.PreflightFailed as e:
            assert e.returncode == 0
        else:
            raise AssertionError(f"{bad!r} must raise")
    ok = pc.parse_preflight(0, json.dumps({"predictions": [pred(16, MIB)], "seconds": 0.2}), "")
    assert ok["seconds"] == 0.2


def test_the_batch_above_the_largest_and_the_largest_read_back():
    assert pc.step_above(47) == 48
    assert pc.step_above(0) == 1  # no batch fits: batch 1 must run out of memory
    assert pc.step_above(None) is None  # every batch fits
    pf = {"largest_batch": {"limit_bytes": GIB, "defaults": 47, "recommended": 52,
                            "policy": "expandable_segments:True", "monotone": True}}
    assert pc.largest_batch(pf) == 47 and pc.largest_batch(pf, "recommended") == 52
    for bad in ({"predictions": []}, {"largest_batch": {"defaults": 3}}):
        try:
            pc.largest_batch(bad, "recommended")
        except KeyError:
            pass
        else:
            raise AssertionError("a missing largest batch must raise")


def test_the_limit_lies_between_the_two_largest_at_batches_on_a_page():
    pf = {"predictions": [pred(16, 3 * GIB), pred(32, 5 * GIB), pred(64, 9 * GIB + 3 * MIB)]}
    limit, note = pc.choose_limit(pf, [16, 32, 64], H100_TOTAL)
    assert 5 * GIB < limit < 9 * GIB and limit % pc.PAGE == 0 and "halfway" in note
    assert limit == 7 * GIB  # (5 GiB + 9 GiB + 3 MiB) / 2 rounded down to 2 MiB
    flat = {"predictions": [pred(32, 10 * GIB + MIB), pred(64, 10 * GIB + MIB)]}
    limit, note = pc.choose_limit(flat, [32, 64])
    assert limit == 10 * GIB and "does not grow" in note
    big = {"predictions": [pred(32, 70 * GIB), pred(64, 140 * GIB)]}
    limit, note = pc.choose_limit(big, [32, 64], H100_TOTAL)
    assert limit <= 0.9 * H100_TOTAL and "capped" in note
    try:
        pc.choose_limit({"predictions": [pred(32, GIB)]}, [32, 64])
    except ValueError as e:
        assert "64" in str(e)
    else:
        raise AssertionError("a missing prediction must raise")


def test_the_margins_name_a_batch_above_predicted_within_the_limit_as_inconsistent():
    pf = {"predictions": [pred(47, 7 * GIB - 10 * MIB), pred(48, 7 * GIB + 90 * MIB)]}
    notes = pc.margin_notes(pf, 47, 48, 7 * GIB)
    assert "10.0 MiB within" in notes[0] and "90.0 MiB above" in notes[1]
    assert "inconsistent" not in " ".join(notes)
    pf = {"predictions": [pred(47, 7 * GIB + 4 * MIB), pred(48, 7 * GIB)]}
    notes = pc.margin_notes(pf, 47, 48, 7 * GIB)
    assert "freeing the cache" in notes[0] and "inconsistent" in notes[1]
    assert pc.margin_notes(pf, 0, 1, 7 * GIB) == [] or "batch 1" in pc.margin_notes(pf, 0, 1,
                                                                                    7 * GIB)[0]


# ---- the fraction ----------------------------------------------------------------------------

def test_the_fraction_caps_reserved_memory_at_the_limit_to_the_byte():
    for total in (H100_TOTAL, H200_TOTAL, 25757220864, 3 * GIB + 7):
        for limit in (2 * MIB, 7 * GIB + 6 * MIB, 20 * GIB, total // 3 // pc.PAGE * pc.PAGE,
                      total - 1, total):
            if limit > total:
                continue
            f = pc.fraction_for(limit, total)
            assert 0 < f <= 1.0
            # PyTorch: allowed_memory_maximum = static_cast<size_t>(fraction * device_total)
            assert math.floor(f * float(total)) >= limit, (total, limit)
            assert math.floor(f * float(total)) < limit + 1 + total * 1e-15, (total, limit)
            assert math.floor(math.nextafter(f, 0) * float(total)) < limit  # the smallest
            assert float(repr(f)) == f  # the child reads back the same double
    for bad in ((0, H100_TOTAL), (H100_TOTAL + 1, H100_TOTAL), (GIB, 0)):
        try:
            pc.fraction_for(*bad)
        except ValueError:
            pass
        else:
            raise AssertionError(f"{bad} must raise")


# ---- the commands ----------------------------------------------------------------------------

def test_the_commands_as_run():
    cmd = pc.preflight_command("gb", ["a.pickle", "b.pickle", "c.pickle"], (2, 4, 8), (16, 32),
                               20 * GIB)
    assert cmd == ["gb", "preflight", "a.pickle", "b.pickle", "c.pickle", "--batches", "2,4,8",
                   "--at", "16", "--at", "32", "--fit", str(20 * GIB), "--json", "-"]
    assert pc.preflight_command("gb", ["a", "b"], (2, 4)) == ["gb", "preflight", "a", "b",
                                                              "--batches", "2,4", "--json", "-"]
    f = pc.fraction_for(20 * GIB, H100_TOTAL)
    c = pc.child_command("py", "w.py", "cnn", 48, "out.json", fraction=f, record=None)
    assert c[:7] == ["py", "w.py", "cnn", "--batch", "48", "--steps", "3"]
    assert float(c[c.index("--fraction") + 1]) == f and c[-2:] == ["--json", "out.json"]
    assert "--record" in pc.child_command("py", "w.py", "cnn", 2, "o", record="s.pickle")


def test_the_child_sees_no_allocator_setting_but_the_policy_exactly():
    base = {"PATH": "/bin", "PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:64",
            "PYTORCH_ALLOC_CONF": "expandable_segments:True", "HOME": "/h"}
    env = pc.child_env(base)
    assert not any(k in env for k in pc.ALLOC_ENV) and env["HOME"] == "/h"
    conf = "expandable_segments:True,roundup_power2_divisions:[1:2,32768:4]"
    env = pc.child_env(base, conf)
    assert env["PYTORCH_CUDA_ALLOC_CONF"] == conf and "PYTORCH_ALLOC_CONF" not in env


def test_a_fit_row_wants_the_oom_it_expects_and_the_conf_it_set():
    r = {"oom": False, "max_reserved": 7 * GIB, "limit_bytes": 7 * GIB, "conf_seen": None}
    assert pc.fit_row("largest", 47, 7 * GIB, False, r)["ok"] is True
    row = pc.fit_row("above", 48, 7 * GIB, True, r)
    assert row["ok"] is False and "expected OOM, PyTorch runs" in row["problems"][0]
    short = dict(r, limit_bytes=7 * GIB - 1)
    assert "below the limit" in pc.fit_row("largest", 47, 7 * GIB, False, short)["problems"][0]
    row = pc.fit_row("recommended", 52, 7 * GIB, False, r, conf="expandable_segments:True")
    assert row["ok"] is False and "expandable_segments:True" in row["problems"][0]
    oom = dict(r, oom=True, message="CUDA out of memory. Tried to allocate 2.00 GiB")
    row = pc.fit_row("largest", 47, 7 * GIB, False, oom)
    assert row["ok"] is False and "Tried to allocate" in row["problems"][0]


def test_the_report_shows_each_row_and_fails_where_a_check_fails():
    w = {"workload": "cnn", "seconds": 12.0, "limit": 7 * GIB, "notes": ["a note"],
         "largest_batch": {"defaults": 47, "recommended": 47, "policy": "", "monotone": True},
         "preflight": [{"purpose": "--at and --fit", "args": ["gpu-basics", "preflight"],
                        "returncode": 0, "wall_seconds": 1.234, "seconds_reported": 0.9}],
         "rows": [pc.peak_row(2, "recorded", pred(2, GIB), {"max_reserved": GIB, "oom": False,
                                                            "max_allocated": GIB}, check=False),
                  pc.peak_row(32, "--at", pred(32, 5 * GIB),
                              {"max_reserved": int(5 * GIB * 1.05), "oom": False,
                               "max_allocated": GIB})],
         "fit": [pc.fit_row("defaults: the largest batch that fits", 47, 7 * GIB, False,
                            {"oom": False, "max_reserved": 7 * GIB, "conf_seen": None})]}
    w["ok"] = pc.workload_ok(w)
    text = pc.workload_report(w)
    assert w["ok"] is False and "FAILS: measured" in text and "+5.00" in text
    assert "1.23 s wall" in text and "0.90 s by its own count" in text and "a note" in text
    assert "| 2 | recorded |" in text and "| info |" in text
    assert "cnn: 1 of 2 checks hold" in pc.summary([w])
    w["rows"][1] = pc.peak_row(32, "--at", pred(32, 5 * GIB), {"max_reserved": 5 * GIB,
                                                               "oom": False, "max_allocated": 1})
    assert pc.workload_ok(w)
    assert not pc.workload_ok(dict(w, error="preflight refused (exit 2): x"))
    assert not pc.workload_ok(dict(w, rows=[]))  # nothing checked is no success


# ---- the harness, end to end, with stand-ins -------------------------------------------------

C, S = 3 * GIB, 96 * MIB  # the stand-in job: C + S * batch bytes reserved
FAKE_CHILD = r'''
import json, math, os, sys
a = sys.argv[1:]
out = a[a.index("--json") + 1]
if a[0] == "probe":
    json.dump({"mem_get_info_total": %(total)d, "free": %(total)d, "total_memory": %(total)d,
               "name": "stand-in", "torch": "0", "cuda": "0", "python": sys.executable},
              open(out, "w"))
    sys.exit(0)
b = int(a[a.index("--batch") + 1])
slope = %(S)d * (0.9 if os.environ.get("PYTORCH_CUDA_ALLOC_CONF") == "expandable_segments:True"
                 else 1.0)
need = %(C)d + int(slope * b * float(os.environ.get("FAKE_SKEW", "1")))
r = {"oom": False, "max_reserved": need, "max_allocated": need - 1, "seconds": 0.01,
     "conf_seen": os.environ.get("PYTORCH_CUDA_ALLOC_CONF"), "limit_bytes": None}
if "--fraction" in a:
    r["limit_bytes"] = math.floor(float(a[a.index("--fraction") + 1]) * %(total)d)
    if need > r["limit_bytes"]:
        r.update(oom=True, message="CUDA out of memory.", max_reserved=r["limit_bytes"])
if "--record" in a:
    open(a[a.index("--record") + 1], "wb").write(b"snapshot")
json.dump(r, open(out, "w"))
'''
FAKE_GB = r'''
import json, os, sys
a = sys.argv[2:]
if os.environ.get("FAKE_REFUSE"):
    sys.stderr.write("gpu-basics: " + os.environ["FAKE_REFUSE"] + "\n")
    sys.exit(2)
at = [int(a[i + 1]) for i, x in enumerate(a) if x == "--at"]
at = at or [int(x) for x in a[a.index("--batches") + 1].split(",")]
preds = []
for b in at:
    for w in ("defaults", "recommended"):
        v = %(C)d + %(S)d * b
        preds.append({"batch": b, "which": w, "policy": "", "peak_allocated_bytes": v - 1,
                      "peak_reserved_bytes": v})
out = {"predictions": preds, "recommended_policy": "", "seconds": 0.05}
if "--fit" in a:
    lim = int(a[a.index("--fit") + 1])
    n = (lim - %(C)d) // %(S)d
    policy = os.environ.get("FAKE_POLICY", "")
    rec = int((lim - %(C)d) // (%(S)d * 0.9)) if policy else n
    out["largest_batch"] = {"limit_bytes": lim, "defaults": n, "recommended": rec,
                            "policy": policy, "monotone": True}
print(json.dumps(out))
'''


def stand_ins(root):
    subst = {"C": C, "S": S, "total": H100_TOTAL}
    child = os.path.join(root, "child.py")
    with open(child, "w") as f:
        f.write(FAKE_CHILD % subst)
    gb = os.path.join(root, "gpu-basics")
    with open(gb, "w") as f:
        f.write(f"#!{sys.executable}\n" + FAKE_GB % subst)
    os.chmod(gb, 0o755)
    return child, gb


def run_validate(root, workload="cnn", env=None, no_device=True):
    child, gb = stand_ins(root)
    args = argparse.Namespace(work=root, gpu_basics=gb, limit=None, no_device=no_device)
    old_child, saved = pv.CHILD, dict(os.environ)
    pv.CHILD = child
    os.environ.update(env or {})
    try:
        device = pv.probe(args)
        return pv.validate(args, workload, device)
    finally:
        pv.CHILD = old_child
        os.environ.clear()
        os.environ.update(saved)


def test_the_harness_holds_where_pytorch_agrees_with_the_prediction():
    with tempfile.TemporaryDirectory() as root:
        w = run_validate(root, no_device=False)
        assert "error" not in w, w.get("error")
        # limit halfway between 64's and 128's peaks: C + 96 S -> largest 96, above 97
        assert w["limit"] == C + 96 * S and w["largest_batch"]["defaults"] == 96
        # the device: its free memory less 2 GiB, to a page
        dev = pc.page_down(H100_TOTAL - pc.DEVICE_RESERVE)
        assert w["device_limit"] == dev
        largest_dev = (dev - C) // S
        assert [r["batch"] for r in w["rows"]] == [4, 8, 16, 32, 64, 128, 96, largest_dev]
        assert w["rows"][-1]["role"] == "largest on the device"
        assert [r["ok"] for r in w["rows"]] == [None] * 3 + [True] * 5
        fit = {r["batch"]: r for r in w["fit"]}
        assert fit[96]["pytorch"] == "runs" and fit[97]["pytorch"] == "OOM"
        assert w["ok"] and len(w["preflight"]) == 5
        assert any("--fit" in c["args"] for c in w["preflight"])
        assert "holds" in pc.workload_report(w)


def test_the_recommended_policy_runs_its_largest_batch_with_exactly_its_conf():
    with tempfile.TemporaryDirectory() as root:
        w = run_validate(root, env={"FAKE_POLICY": "expandable_segments:True",
                                    "PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:64"})
        assert w["ok"], pc.workload_report(w)
        rec = [r for r in w["fit"] if r["conf"]]
        assert len(rec) == 1 and rec[0]["batch"] == 106 and rec[0]["pytorch"] == "runs"
        assert rec[0]["conf_seen"] == "expandable_segments:True"
        assert all(r["conf_seen"] is None for r in w["fit"] if not r["conf"])


def test_the_harness_fails_where_pytorch_uses_more_than_predicted():
    with tempfile.TemporaryDirectory() as root:
        w = run_validate(root, env={"FAKE_SKEW": "1.2"})
        assert not w["ok"]
        assert any(r["ok"] is False and "off the predicted" in r["problems"][0]
                   for r in w["rows"])
        # under the fraction, 1.2x the slope: batch 96 no longer fits
        assert any(r["batch"] == 96 and r["ok"] is False for r in w["fit"])


def test_the_harness_reports_a_refusal_with_preflights_message():
    with tempfile.TemporaryDirectory() as root:
        msg = "b8.pickle: recordings cannot be aligned at event #812 (free of alloc #3)"
        w = run_validate(root, env={"FAKE_REFUSE": msg})
        assert not w["ok"] and w["error"] == "preflight refused (exit 2): gpu-basics: " + msg
        assert w["preflight"][0]["returncode"] == 2 and not w["rows"]
        assert "FAILED: preflight refused (exit 2)" in pc.workload_report(w)


def test_without_pytorch_the_harness_is_skipped_with_its_reason():
    if importlib.util.find_spec("torch") is not None:
        return  # with PyTorch it would run the workloads (ctest's torch.preflight does)
    with tempfile.TemporaryDirectory() as root:
        p = subprocess.run([sys.executable, os.path.join(HERE, "..", "preflight_validation.py"),
                            "run", "--gpu-basics", "gb", "--work", root], capture_output=True,
                           text=True, timeout=60)
        assert p.returncode == 77 and "skipped: no PyTorch" in p.stdout


def test_the_workloads_import_without_pytorch_and_name_the_same_workloads():
    spec = importlib.util.spec_from_file_location(
        "preflight_workloads", os.path.join(HERE, "..", "preflight_workloads.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert tuple(mod.NAMES) == pc.NAMES and set(mod.WORKLOADS) == set(pc.NAMES)


if __name__ == "__main__":
    for name, fn in sorted(globals().items()):
        if name.startswith("test_") and callable(fn):
            fn()
            print("ok", name)
