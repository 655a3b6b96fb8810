"""advise_validation.py's parts that need neither PyTorch nor a GPU: the printed line run verbatim
by bash before the child (with a stand-in `python` for the fraction the line computes), the
advice read back, the limits asked for, the verdicts and the tables. Runs under pytest or alone:
    python3 tests/torch/tests/test_advise_checks.py
"""
import argparse
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import advise_checks as ac  # noqa: E402
import advise_validation as av  # noqa: E402

MIB = 1 << 20
PAGE = 2 * MIB
# As advise prints them (src/snapshot/advise_present.cpp, lines_of).
SHELL_FRACTION = ("$(python -c 'import torch; print(min(1.0, (1866465280 * 10**6 // "
                  "torch.cuda.mem_get_info()[1] + 2) / 10**6))')")
LINES = {
    "unset PYTORCH_CUDA_ALLOC_CONF": None,
    "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True": "expandable_segments:True",
    "export PYTORCH_CUDA_ALLOC_CONF='roundup_power2_divisions:[1:2,32768:4]'":
        "roundup_power2_divisions:[1:2,32768:4]",
    "export PYTORCH_CUDA_ALLOC_CONF=per_process_memory_fraction:0.022727":
        "per_process_memory_fraction:0.022727",
    "export PYTORCH_CUDA_ALLOC_CONF=garbage_collection_threshold:0.8,per_process_memory_fraction:"
    + '"' + SHELL_FRACTION + '"':
        "garbage_collection_threshold:0.8,per_process_memory_fraction:0.012345",
    "export PYTORCH_CUDA_ALLOC_CONF=per_process_memory_fraction:" + '"' + SHELL_FRACTION + '"':
        "per_process_memory_fraction:0.012345",
}


def fake_python_dir(root):
    """A directory whose `python` answers as the line's $(python -c ...) would: 0.012345."""
    d = os.path.join(root, "fakepy")
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "python")
    with open(path, "w") as f:
        f.write('#!/bin/sh\ncase "$2" in *mem_get_info*) echo 0.012345;; *) exit 3;; esac\n')
    os.chmod(path, 0o755)
    return d


PRINT_ENV = ("import os, sys; v = os.environ.get('PYTORCH_CUDA_ALLOC_CONF'); "
             "print(repr(v) + '|' + '|'.join(sys.argv[1:]))")


def test_each_printed_line_runs_verbatim_and_the_child_sees_what_it_sets():
    with tempfile.TemporaryDirectory() as root:
        base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                "PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:64",  # must not leak through
                "PYTORCH_ALLOC_CONF": "expandable_segments:True"}
        env = ac.line_env(base, fake_python_dir(root))
        assert "PYTORCH_ALLOC_CONF" not in env and "PYTORCH_CUDA_ALLOC_CONF" not in env
        assert env["PATH"].startswith(os.path.join(root, "fakepy") + os.pathsep)
        for line, want in LINES.items():
            cmd = ac.line_command(line, [sys.executable, "-c", PRINT_ENV, "a b", "--x"])
            assert cmd[1] == "-c" and cmd[2] == line + '\nexec "$@"' and cmd[3] == "_"
            out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
            assert out.stdout.strip() == repr(want) + "|a b|--x", (line, out.stdout, out.stderr)


def test_run_child_starts_the_line_then_the_child_with_no_conf_or_fraction_of_its_own():
    with tempfile.TemporaryDirectory() as root:
        child = os.path.join(root, "child.py")
        with open(child, "w") as f:
            f.write("import json, os, sys\nprint('RESULT ' + json.dumps({'env_seen': "
                    "os.environ.get('PYTORCH_CUDA_ALLOC_CONF'), 'argv': sys.argv[1:]}))\n")
        args = argparse.Namespace(examples="/ex", python_dir=fake_python_dir(root), work=root)
        old, av.CHILD = av.CHILD, child
        saved = os.environ.get("PYTORCH_CUDA_ALLOC_CONF")
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "max_split_size_mb:64"
        try:
            line = list(LINES)[-1]
            r = av.run_child(args, "kv_cache", line=line)
            assert r["env_seen"] == "per_process_memory_fraction:0.012345"
            assert r["argv"] == ["--workload", "kv_cache", "--examples", "/ex"]
            r = av.run_child(args, "kv_cache", line="unset PYTORCH_CUDA_ALLOC_CONF")
            assert r["env_seen"] is None
            r = av.run_child(args, "kv_cache", conf="expandable_segments:True", limit=3 * MIB)
            assert r["env_seen"] == "expandable_segments:True"
            assert r["argv"][-2:] == ["--limit", str(3 * MIB)]
            try:
                av.run_child(args, "kv_cache", limit=MIB, line=line)
                raise AssertionError("a line with a limit of the harness ran")
            except ValueError:
                pass
        finally:
            av.CHILD = old
            if saved is None:
                os.environ.pop("PYTORCH_CUDA_ALLOC_CONF", None)
            else:
                os.environ["PYTORCH_CUDA_ALLOC_CONF"] = saved


def test_python_shim_is_the_interpreters_own_directory_or_a_script_that_execs_it():
    with tempfile.TemporaryDirectory() as root:
        venv = os.path.join(root, "venv", "bin")
        os.makedirs(venv)
        os.symlink(sys.executable, os.path.join(venv, "python"))
        assert ac.python_shim(os.path.join(venv, "python"), root) == venv
        lone = os.path.join(root, "lone", "python3.99")
        os.makedirs(os.path.dirname(lone))
        os.symlink(sys.executable, lone)
        d = ac.python_shim(lone, os.path.join(root, "work"))
        assert d == os.path.join(root, "work", "bin")
        out = subprocess.run([os.path.join(d, "python"), "-c", "print(6 * 7)"],
                             capture_output=True, text=True, check=True)
        assert out.stdout.strip() == "42"


def advice(line_limit=None, rec="expandable_segments:True", torch_env=None, peaks=None):
    peaks = peaks or {"": 1866 * MIB, rec: 1700 * MIB}
    fits = lambda p: [{"limit_bytes": 1780 * MIB + 5, "fits": True,
                       "peak_reserved_bytes": p - 90 * MIB}]
    return {"policies": [{"conf": c, "peak_reserved_bytes": p, "fits": fits(p)}
                         for c, p in peaks.items()],
            "recommended": {"conf": rec, "use_conf": rec, "gbt": "",
                            "torch_env": torch_env or "export PYTORCH_CUDA_ALLOC_CONF=" + rec},
            "line_limit_bytes": line_limit,
            "defaults": {"conf": "", "smallest_limit_bytes": 1744 * MIB},
            "recommendation": {"conf": rec, "smallest_limit_bytes": 1600 * MIB}}


def test_the_prediction_is_the_bare_peak_or_the_peak_under_the_lines_limit():
    assert ac.predicted_peak(advice()) == 1700 * MIB
    assert ac.predicted_peak(advice(line_limit=1780 * MIB)) == 1610 * MIB
    assert ac.predicted_peak(advice(rec="", peaks={"": 1866 * MIB})) == 1866 * MIB
    try:
        ac.predicted_peak(advice(rec="nope", peaks={"": 1}))
        raise AssertionError("an unknown recommendation was read")
    except ValueError:
        pass


def test_a_line_limit_needs_a_fraction_in_the_line():
    a = advice(line_limit=1780 * MIB, torch_env="export PYTORCH_CUDA_ALLOC_CONF=x:1")
    assert "carries no per_process_memory_fraction" in ac.line_problems(a)[0]
    a["recommended"]["torch_env"] = "export PYTORCH_CUDA_ALLOC_CONF=per_process_memory_fraction:0.1"
    assert ac.line_problems(a) == []
    assert ac.line_form_notes(a, True) == []
    assert "is a number" in ac.line_form_notes(a, False)[0]
    a["recommended"]["torch_env"] = list(LINES)[-1]
    assert ac.line_form_notes(a, False) == []
    assert "computes the fraction in the shell" in ac.line_form_notes(a, True)[0]
    assert ac.line_problems(advice(torch_env="PYTORCH_CUDA_ALLOC_CONF=x:1"))


def test_the_fit_limits_lie_where_the_line_must_carry_a_fraction():
    a = advice()
    limit, why = ac.fit_limit(a)
    assert limit % PAGE == 0 and 1744 * MIB * 1.02 <= limit < 1866 * MIB and why == ""
    a["policies"][0]["peak_reserved_bytes"] = 1776 * MIB  # below +2%: a page above smallest
    assert ac.fit_limit(a) == (1746 * MIB, "")
    a["policies"][0]["peak_reserved_bytes"] = 1746 * MIB  # no room: said why
    limit, why = ac.fit_limit(a)
    assert limit == ac.page_up(1744 * MIB * 1.02) and "no limit between them" in why
    tight = ac.tight_limit(advice())
    assert tight % PAGE == 0 and 1600 * MIB * 1.02 <= tight < 1744 * MIB
    assert ac.tight_limit(advice(rec="", peaks={"": 1866 * MIB})) is None
    b = advice()
    b["recommendation"]["smallest_limit_bytes"] = 1720 * MIB
    assert ac.tight_limit(b) is None


def test_verdicts_of_the_lines():
    run = lambda peak, oom=False: {"max_reserved": peak, "oom": oom, "message": "boom"}
    p, d = (1000 * MIB,) * 2, (1100 * MIB,) * 2
    one = lambda n: (n, n)
    assert ac.no_fit_problems(run(1010 * MIB), p, d, d[0]) == []  # 1%
    assert ac.no_fit_problems(run(100 * MIB), one(98 * MIB), d, d[0]) == []  # one page
    assert "outside the predicted" in ac.no_fit_problems(run(1012 * MIB), p, d, d[0])[0]
    assert ac.no_fit_problems(run(p[0], True), p, d, d[0])[0].startswith("out of memory")
    above = ac.no_fit_problems(run(1005 * MIB), p, d, p[0])
    assert len(above) == 1 and "above the defaults' measured" in above[0]
    assert ac.no_fit_problems(run(d[0]), d, d, d[0] - 2 * MIB) == []  # the defaults: not lower
    assert ac.no_fit_problems(run(p[0]), None, d, d[0]) == ["the advice has no peak for its "
                                                            "recommendation"]
    # Over placements: the prediction is a range, the measured peak any point of it.
    spread = (1000 * MIB, 1100 * MIB)
    assert ac.no_fit_problems(run(1090 * MIB), spread, (1200 * MIB, 1300 * MIB), 1250 * MIB) == []
    assert "outside" in ac.no_fit_problems(run(1120 * MIB), spread, (1200 * MIB,) * 2,
                                           1200 * MIB)[0]
    # Ranges that overlap claim less only than the defaults' worst placement.
    overlap = (1050 * MIB, 1300 * MIB)
    assert ac.no_fit_problems(run(1090 * MIB), spread, overlap, 1060 * MIB) == []
    worse = ac.no_fit_problems(run(1100 * MIB), spread, (1050 * MIB, 1080 * MIB), 1060 * MIB)
    assert worse == []  # not lower at the worst placement either: no claim to break
    over = ac.no_fit_problems(run(1100 * MIB), (1000 * MIB, 1100 * MIB), (1050 * MIB, 1090 * MIB),
                              1060 * MIB)
    assert over == []  # 1100 is within 1% of 1090: the defaults' worst placement, near enough
    both = ac.no_fit_problems(run(1250 * MIB), spread, (1050 * MIB, 1200 * MIB), 1060 * MIB)
    assert len(both) == 2 and "outside" in both[0] and "worst placement 1200.0" in both[1]
    q = p[0]
    assert ac.fit_problems(run(q), q) == []
    assert "above the limit" in ac.fit_problems(run(q + PAGE), q)[0]
    assert ac.fit_problems(run(q - PAGE, True), q)[0] == "out of memory: boom"
    assert ac.diff_percent(q, q + 10 * MIB) == 1.0 and ac.diff_percent(None, q) is None


def test_the_table_shortens_the_shell_fraction_and_escapes_pipes():
    line = list(LINES)[-2]
    short = ac.shorten_line(line)
    assert "$(python -c …)" in short and "mem_get_info" not in short and short.endswith('"')
    assert len(ac.shorten_line("x" * 200, 20)) == 20
    row = {"check": "--fit 1780MiB (fraction from the shell)", "line": line,
           "predicted": 1610 * MIB, "measured": 1612 * MIB, "diff_percent": 0.124,
           "limit": 1780 * MIB, "oom": False, "ok": False, "problems": ["a|b"],
           "env_seen": "per_process_memory_fraction:0.012345", "notes": ["n"]}
    text = ac.workload_report({"workload": "w", "seconds": 3.2, "rows": [row], "notes": ["m"],
                               "claims": [{"check": "c", "predicted": MIB, "pytorch": "runs",
                                           "ok": True, "detail": "d"}]})
    assert "| 1610.0 | 1612.0 | +0.12 | 1780.0 | no | FAILS: a\\|b |" in text
    row["predicted"] = [1600 * MIB, 1610 * MIB]
    assert "| 1600.0-1610.0 | 1612.0 |" in ac.workload_report({"workload": "w", "rows": [row]})
    assert "| c | 1.0 MiB | runs | yes | d |" in text
    assert line in text and "note: m" in text and "0.012345" in text


def test_validate_runs_every_line_and_claim_with_stand_ins_for_pytorch_and_advise():
    """The flow of one workload, with advise and the children stood in for: which lines run, in
    what form, and a failure that reruns the line with history."""
    fit = 1780 * MIB

    def fake_advise(args, workload, snap, tag, fits=(), device_memory=None):
        a = advice(line_limit=fit if fits else None)
        a.update(trace_events=10, _seconds=0.1, fit_choice_everywhere=[True] * len(fits))
        a["defaults"]["smallest_limit_by_placement"] = [{"placement": "x", "bytes": 1730 * MIB}]
        a["policies"][1]["fits"][0]["limit_bytes"] = fits[0] if fits else fit
        if fits:
            a["recommended"]["conf"] = ""
            fraction = "0.022" if device_memory else '"' + SHELL_FRACTION + '"'
            a["recommended"]["torch_env"] = ("export PYTORCH_CUDA_ALLOC_CONF="
                                             "per_process_memory_fraction:" + fraction)
        calls.append(("advise", tag, tuple(fits), device_memory))
        return a

    def fake_child(args, workload, conf=None, limit=None, record=None, line=None):
        calls.append(("child", conf, limit, record is not None, line))
        if record:
            with open(record, "wb") as f:
                ac.pickle.dump({"device_traces": [[]]}, f)
        if limit:
            floor = (1700 if not conf else 1580) * MIB  # what the +-2% limits straddle
            return {"oom": limit < floor, "max_reserved": 1600 * MIB, "message": "m"}
        if line and "$(python" in line:  # as if the shell's fraction let it pass the limit
            return {"oom": False, "max_reserved": fit + PAGE, "env_seen": "x"}
        if line and "fraction:0.022" in line:
            return {"oom": False, "max_reserved": 1600 * MIB}
        return {"oom": False, "max_reserved": 1866 * MIB if line is None else 1700 * MIB}

    calls = []
    old = av.advise, av.run_child
    av.advise, av.run_child = fake_advise, fake_child
    try:
        with tempfile.TemporaryDirectory() as root:
            args = argparse.Namespace(work=root, examples="/ex")
            w = av.validate(args, "kv_cache", 80 << 30, None)
    finally:
        av.advise, av.run_child = old
    assert "error" not in w, w.get("error")
    assert [a[1:] for a in calls if a[0] == "advise"] == [
        ("nofit", (), None), ("fit", (fit,), 80 << 30), ("fit_shell", (fit,), None),
        ("fit_tight", (ac.page_up(1600 * MIB * 1.02),), 80 << 30)]
    lines = [a[4] for a in calls if a[0] == "child" and a[4] is not None]
    assert lines[0] == "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
    assert lines[1].endswith("per_process_memory_fraction:0.022") and "$(python" in lines[2]
    assert all(a[1] is None and a[2] is None for a in calls if a[0] == "child" and a[4])
    assert [r["ok"] for r in w["rows"]] == [True, True, False, True], [r["problems"] for r in w["rows"]]
    assert "above the limit" in w["rows"][2]["problems"][0]
    assert len(w["rows"][2]["reruns"]["outcomes"]) == av.RERUNS  # the shell's line, again
    assert sum(1 for a in calls if a[0] == "child" and a[4] == lines[2]) == 1 + av.RERUNS
    assert [c["ok"] for c in w["claims"]] == [True, True, True, True, True]
    assert w["rows"][1]["check"] == "--fit 1780MiB (device memory given)"
    assert w["ok"] is False and "FAILS: peak 1782.0 MiB above the limit" in ac.workload_report(w)


if __name__ == "__main__":
    tests = [(n, f) for n, f in sorted(globals().items()) if n.startswith("test_")]
    for n, f in tests:
        f()
        print(f"ok   {n}")
    print(f"{len(tests)} passed")


def test_the_prediction_without_a_line_limit_spans_the_placements():
    a = advice()
    assert ac.predicted_range(a) == (1700 * MIB, 1700 * MIB)  # saved before placements
    a["recommendation"]["peak_reserved_by_placement"] = [
        {"placement": "ascending", "bytes": 1700 * MIB},
        {"placement": "shuffled-1", "bytes": 1760 * MIB}]
    assert ac.predicted_range(a) == (1700 * MIB, 1760 * MIB)
    a["line_limit_bytes"] = 1780 * MIB  # the line's limit: the one figure under it
    assert ac.predicted_range(a) == (1610 * MIB, 1610 * MIB)
    assert ac.placement_range({}, 5) == (5, 5)
