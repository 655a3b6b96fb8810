"""gpu_basics.torch.preflight() on the CPU: a stand-in torch module that logs every memory call
and writes a small file as its snapshot, and a stand-in gpu-basics script that logs its arguments
and answers as `gpu-basics preflight` does (tables on stdout, the JSON at --json), or refuses with
exit code 2 and one line. The real CLI on real snapshots is tests/unit/test_preflight.cpp; the
helper on a GPU, tests/torch/."""
import json
import os
import stat
import sys
import types

import pytest

REFUSAL = ("gpu-basics: b4.pickle (batch 4): event 7 (alloc of 4096 B on stream 0, frames "
           "model.py:12 in forward): the size is not affine in the batch")

# The stand-in CLI: logs argv as JSON lines to $FAKE_LOG; refuses where $FAKE_REFUSE is set.
FAKE_CLI = r'''#!{python}
import json, os, sys
args = sys.argv[1:]
with open(os.environ["FAKE_LOG"], "a") as f:
    f.write(json.dumps(args) + "\n")
if os.environ.get("FAKE_REFUSE"):
    sys.stderr.write(os.environ["FAKE_REFUSE"] + "\n")
    sys.exit(2)
i = args.index("--batches")
batches = [int(b) for b in args[i + 1].split(",")]
out = {{"files": args[1:1 + len(batches)], "batches": batches,
        "predictions": [{{"batch": 16, "which": "defaults", "policy": "",
                          "peak_allocated_bytes": 1, "peak_reserved_bytes": 2}}],
        "largest_batch": {{"limit_bytes": 3, "defaults": 40, "recommended": 41,
                           "policy": "", "monotone": True}}}}
with open(args[args.index("--json") + 1], "w") as f:
    json.dump(out, f)
print("Predicted peaks (the stand-in's table)")
'''


def _fake_torch(monkeypatch):
    """A torch whose memory calls are logged in order; _dump_snapshot writes a small file."""
    log = []
    memory = types.SimpleNamespace(
        _record_memory_history=lambda **kw: log.append(("history", kw)),
        _dump_snapshot=lambda path: (log.append(("dump", os.path.basename(path))),
                                     open(path, "wb").write(b"snapshot")))
    cuda = types.SimpleNamespace(
        memory=memory,
        empty_cache=lambda: log.append(("empty_cache",)),
        reset_peak_memory_stats=lambda: log.append(("reset_peaks",)),
        synchronize=lambda: log.append(("synchronize",)),
        is_available=lambda: True)
    torch = types.ModuleType("torch")
    torch.cuda = cuda
    torch._C = types.SimpleNamespace(_GLIBCXX_USE_CXX11_ABI=True)
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.delitem(sys.modules, "gpu_basics.torch", raising=False)
    import gpu_basics.torch as gbt
    return gbt, log


@pytest.fixture
def cli(tmp_path, monkeypatch):
    path = tmp_path / "bin" / "gpu-basics"
    path.parent.mkdir()
    path.write_text(FAKE_CLI.format(python=sys.executable))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    calls = tmp_path / "calls.jsonl"
    monkeypatch.setenv("FAKE_LOG", str(calls))
    monkeypatch.delenv("FAKE_REFUSE", raising=False)

    def argv():
        return [json.loads(line) for line in calls.read_text().splitlines()]
    return types.SimpleNamespace(path=str(path), argv=argv)


def test_each_batch_is_recorded_in_order_from_a_clean_state(monkeypatch, tmp_path, cli, capsys):
    gbt, log = _fake_torch(monkeypatch)
    steps = []

    def step(b):
        steps.append(b)
        log.append(("step", b))
    out = tmp_path / "recordings"
    result = gbt.preflight(step, batches=(2, 4, 8), steps=3, at=(16, 32), fit="40GiB",
                           gpu_basics=cli.path, directory=str(out))
    assert steps == [2, 2, 2, 4, 4, 4, 8, 8, 8]
    # Per batch: freed, peaks reset, history on, the steps, the snapshot, history off, freed.
    per_batch = []
    for b in (2, 4, 8):
        per_batch += [("empty_cache",), ("reset_peaks",),
                      ("history", dict(enabled="all", context="all", stacks="python",
                                       max_entries=1_000_000)),
                      ("step", b), ("step", b), ("step", b), ("synchronize",),
                      ("dump", f"b{b}.pickle"), ("history", dict(enabled=None)),
                      ("empty_cache",)]
    assert log == per_batch
    # The CLI: the recordings in order, their batches, each --at, --fit, the JSON to a file.
    (argv,) = cli.argv()
    files = [str(out / f"b{b}.pickle") for b in (2, 4, 8)]
    assert argv[:4] == ["preflight", *files]
    assert argv[4:12] == ["--batches", "2,4,8", "--at", "16", "--at", "32", "--fit", "40GiB"]
    assert argv[12] == "--json" and len(argv) == 14
    assert all(os.path.isfile(f) for f in files)  # kept in the directory given
    # Its JSON returned, its tables printed.
    assert result["largest_batch"]["defaults"] == 40
    assert result["batches"] == [2, 4, 8]
    assert "Predicted peaks (the stand-in's table)" in capsys.readouterr().out


def test_history_is_off_after_a_step_that_raises(monkeypatch, cli):
    gbt, log = _fake_torch(monkeypatch)

    def step(b):
        if b == 4:
            raise MemoryError("out of memory at batch 4")
    with pytest.raises(MemoryError):
        gbt.preflight(step, batches=(2, 4), steps=1, gpu_basics=cli.path)
    assert log[-2:] == [("history", dict(enabled=None)), ("empty_cache",)]
    assert not os.path.exists(os.environ["FAKE_LOG"])  # the CLI never ran


def test_a_refusal_raises_preflights_message(monkeypatch, cli):
    gbt, _ = _fake_torch(monkeypatch)
    monkeypatch.setenv("FAKE_REFUSE", REFUSAL)
    with pytest.raises(gbt.PreflightError) as e:
        gbt.preflight(lambda b: None, batches=(2, 4), steps=1, gpu_basics=cli.path)
    assert str(e.value) == REFUSAL
    assert e.value.exit_code == 2
    # Two batches, no --at or --fit, the snapshots in a temporary folder removed afterwards.
    (argv,) = cli.argv()
    assert argv[3:5] == ["--batches", "2,4"] and argv[5] == "--json" and len(argv) == 7
    assert not os.path.exists(os.path.dirname(argv[1]))


def test_the_executable_is_found_on_path_and_bad_arguments_are_refused(monkeypatch, cli):
    gbt, log = _fake_torch(monkeypatch)
    monkeypatch.setenv("PATH", os.path.dirname(cli.path) + os.pathsep + os.environ["PATH"])
    result = gbt.preflight(lambda b: None, batches=(1, 3), steps=1, fit=123456789)
    assert result["batches"] == [1, 3]
    assert cli.argv()[0][-4:-2] == ["--fit", "123456789"]
    log.clear()
    for bad in [dict(batches=(2,)), dict(batches=(4, 2)), dict(batches=(0, 2)),
                dict(batches=(2, 4, 8, 16)), dict(steps=0)]:
        with pytest.raises(ValueError):
            gbt.preflight(lambda b: None, gpu_basics=cli.path, **bad)
    with pytest.raises(FileNotFoundError, match="not an executable"):
        gbt.preflight(lambda b: None, gpu_basics=os.path.join(os.sep, "no", "gpu-basics"))
    with pytest.raises(FileNotFoundError, match="not found on PATH"):
        gbt.preflight(lambda b: None, gpu_basics="no-such-gpu-basics")
    assert log == []  # nothing recorded before the arguments and the executable are checked


def _real_cli():
    from gpu_basics import _cli
    try:
        return _cli.find_executable()
    except FileNotFoundError:
        return None


@pytest.mark.skipif(_real_cli() is None, reason="no gpu-basics executable built")
def test_the_real_cli_predicts_and_refuses(monkeypatch, tmp_path, capsys):
    """The stand-in torch dumps a synthetic job's snapshot at the batch its steps were called
    with (tests/browser/preflight_job.py); the built gpu-basics predicts from them, or refuses
    recordings of different steps with its own message."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), "tests", "browser"))
    try:
        from preflight_job import job_snapshot
    finally:
        sys.path.pop(0)
    import pickle
    gbt, _ = _fake_torch(monkeypatch)
    seen = {}
    steps_of = {}

    def dump(path):
        b = seen["batch"]
        with open(path, "wb") as f:
            pickle.dump(job_snapshot(b, steps=steps_of.get(b, 2)), f, protocol=4)
    gbt_torch = sys.modules["torch"]
    gbt_torch.cuda.memory._dump_snapshot = dump

    def step(b):
        seen["batch"] = b
    result = gbt.preflight(step, batches=(2, 4, 8), steps=1, at=(16,), fit="256MiB",
                           gpu_basics=_real_cli())
    assert [p["batch"] for p in result["predictions"]] == [16, 16]
    assert result["largest_batch"]["defaults"] > 8
    assert "Predicted peaks" in capsys.readouterr().out
    steps_of[8] = 20  # one recording of ten times the others' steps
    with pytest.raises(gbt.PreflightError, match="not the same job's steps") as e:
        gbt.preflight(step, batches=(2, 8), steps=1, gpu_basics=_real_cli())
    assert e.value.exit_code == 2 and "\n" not in str(e.value)
