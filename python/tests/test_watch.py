"""Advice at an out-of-memory error, on the CPU: the library's in-process advise (the line
`gpu-basics advise --json` gives, the failing request replayed last with its frames), and
gpu_basics.torch.watch() against a stand-in torch module whose observer is called with a canned
snapshot. The GPU side (PyTorch's own observer and snapshot) is tests/torch/."""
import gzip
import json
import os
import pickle
import subprocess
import sys
import types

import pytest

import gpu_basics
from gpu_basics import _cli, _native, _oom

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
H200 = os.path.join(REPO, "tests", "data", "h200_torch_snapshot.pickle")
MiB, GiB = 1 << 20, 1 << 30
A, B, D = 0x7F0000000000, 0x7F0040000000, 0x7F0080000000


def _frames(*sites):
    """PyTorch's frames of stacks="python": innermost first."""
    return [{"filename": f, "line": n, "name": fn} for f, n, fn in sites]


def _oom_snapshot():
    """A job on a 1 GiB device (reserved 600 MiB, 200 MiB free on the device, so 800 MiB
    available): a and b of 300 MiB, a freed, c of 100 MiB put in a's segment, then a request of
    400 MiB fails (the cache cannot serve it, a new segment passes 800 MiB)."""
    step = ("train.py", 42, "step")
    main = ("train.py", 90, "main")

    def ev(action, addr, size, t, frames=()):
        return {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": t,
                "frames": list(frames)}
    trace = [
        ev("segment_alloc", A, 300 * MiB, 1),
        ev("alloc", A, 300 * MiB, 2, _frames(("model.py", 10, "embed"), step, main)),
        ev("segment_alloc", B, 300 * MiB, 3),
        ev("alloc", B, 300 * MiB, 4, _frames(("model.py", 20, "mlp"), step, main)),
        ev("free_requested", A, 300 * MiB, 5),
        ev("free_completed", A, 300 * MiB, 5),
        ev("alloc", A, 100 * MiB, 6, _frames(("model.py", 30, "attn"), step, main)),
        dict(ev("oom", 0, 400 * MiB, 7,
                _frames(("lib/torch/nn/functional.py", 5, "linear"),
                        ("model.py", 44, "head"), step, main)), device_free=200 * MiB),
    ]
    del trace[-1]["addr"]

    def blk(addr, size, state):
        return {"address": addr, "size": size, "requested_size": size if "alloc" in state else 0,
                "state": state, "frames": []}

    def seg(addr, blocks):
        total = sum(b["size"] for b in blocks)
        used = sum(b["size"] for b in blocks if b["state"] == "active_allocated")
        return {"device": 0, "address": addr, "total_size": total, "allocated_size": used,
                "active_size": used, "requested_size": used, "stream": 0,
                "segment_type": "large", "segment_pool_id": (0, 0), "is_expandable": False,
                "frames": [], "blocks": blocks}
    return {
        "segments": [seg(A, [blk(A, 100 * MiB, "active_allocated"),
                             blk(A + 100 * MiB, 200 * MiB, "inactive")]),
                     seg(B, [blk(B, 300 * MiB, "active_allocated")])],
        "device_traces": [trace],
        "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": ""},
        "external_annotations": [],
    }


def _find(doc, text):
    """Whether `text` is one of the strings anywhere in `doc`."""
    if isinstance(doc, str):
        return doc == text
    if isinstance(doc, dict):
        return any(_find(v, text) for v in doc.values())
    if isinstance(doc, list):
        return any(_find(v, text) for v in doc)
    return False


def test_in_process_advice_prints_the_line_the_cli_prints(tmp_path):
    try:
        exe = _cli.find_executable()
    except FileNotFoundError as e:
        pytest.skip(str(e))
    limit, memory = 240 * MiB, 150_000_000_000
    out = tmp_path / "advice.json"
    subprocess.run([exe, "advise", H200, "--fit", str(limit), "--device-memory", str(memory),
                    "--json", str(out)], check=True, capture_output=True, timeout=120)
    cli = json.loads(out.read_text())
    with open(H200, "rb") as f:
        doc, text = gpu_basics.Library().advise(f.read(), limit_bytes=limit,
                                                device_memory_bytes=memory)
    assert doc["recommended"] == cli["recommended"]
    assert doc["fit_choice"] == cli["fit_choice"]
    assert "per_process_memory_fraction:" in doc["recommended"]["torch_env"]
    assert doc["recommended"]["torch_env"] in text


def test_bytes_that_are_not_a_snapshot_are_one_clear_error():
    lib = gpu_basics.Library()
    with pytest.raises(ValueError, match="advise: snapshot") as e:
        lib.advise(b"not a pickle")
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="device_traces"):
        lib.advise(pickle.dumps({"segments": []}))
    with pytest.raises(ValueError, match="unknown key \"limit\""):
        lib.advise(pickle.dumps(_oom_snapshot()), limit=5)
    with pytest.raises(TypeError, match="pickle bytes"):
        lib.advise(_oom_snapshot())


def test_the_failing_request_is_replayed_last_with_its_frames():
    lib = gpu_basics.Library()
    data = pickle.dumps(_oom_snapshot())
    doc, _ = lib.advise(data, limit_bytes=800 * MiB, device_memory_bytes=GiB)
    # live: b 300 + c 100 + the failed 400 MiB
    assert doc["live_peak_bytes"] == 800 * MiB
    assert _find(doc, "model.py:44 in head"), "the failing request's frames"
    without, _ = lib.advise(data, limit_bytes=800 * MiB, device_memory_bytes=GiB,
                            replay_failed_request=False)
    assert without["live_peak_bytes"] == 600 * MiB
    assert not _find(without, "model.py:44 in head")


def _fake_torch(monkeypatch, snapshot=None, total=GiB):
    calls = types.SimpleNamespace(history=[], observers=[])
    torch = types.ModuleType("torch")
    torch.__version__ = "9.9.9"
    torch.version = types.SimpleNamespace(cuda="13.0")

    def snap():
        if isinstance(snapshot, BaseException):
            raise snapshot
        return snapshot
    memory = types.SimpleNamespace(
        _record_memory_history=lambda **kw: calls.history.append(kw), _snapshot=snap)
    torch.cuda = types.SimpleNamespace(
        is_available=lambda: True, is_initialized=lambda: True, memory=memory,
        get_device_properties=lambda d: types.SimpleNamespace(total_memory=total))
    torch._C = types.SimpleNamespace(
        _GLIBCXX_USE_CXX11_ABI=True,
        _cuda_attach_out_of_memory_observer=lambda cb: calls.observers.append(cb))
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.delitem(sys.modules, "gpu_basics.torch", raising=False)
    import gpu_basics.torch as gbt
    return gbt, calls


def test_watch_records_history_and_attaches_an_observer(monkeypatch):
    gbt, calls = _fake_torch(monkeypatch)
    h = gbt.watch(max_entries=1234)
    assert calls.history == [dict(enabled="all", context="all", stacks="python",
                                  max_entries=1234)]
    assert len(calls.observers) == 1 and callable(calls.observers[0])
    with h:
        pass
    assert calls.history[-1] == dict(enabled=None)  # stop(): history off
    h.stop()  # once only
    assert len(calls.history) == 2
    with pytest.raises(ValueError, match="max_entries"):
        gbt.watch(max_entries=0)
    with pytest.raises(ValueError, match="not a size"):
        gbt.watch(fit="lots")
    del gbt._torch._C._cuda_attach_out_of_memory_observer
    with pytest.raises(gpu_basics.GpuBasicsError, match="has no out-of-memory observer"):
        gbt.watch()


def test_the_observer_writes_the_snapshot_and_advice_and_prints_the_line(
        monkeypatch, tmp_path, capsys):
    snapshot = _oom_snapshot()
    gbt, calls = _fake_torch(monkeypatch, snapshot)
    folder = tmp_path / "oom"
    h = gbt.watch(directory=str(folder))
    # PyTorch's call: (device, size, allowed: the device's memory without a fraction, free)
    assert calls.observers[0](0, 400 * MiB, GiB, 200 * MiB) is None
    err = capsys.readouterr().err
    with gzip.open(folder / "snapshot.pickle.gz", "rb") as f:
        assert pickle.loads(f.read()) == snapshot
    doc = json.loads((folder / "advice.json").read_text())
    text = (folder / "advice.txt").read_text()
    assert doc["command"] == "advise" and doc["fit_limits_bytes"] == [800 * MiB]
    assert doc["device_memory_bytes"] == GiB
    line = doc["recommended"]["torch_env"]
    assert line.startswith(("export PYTORCH_CUDA_ALLOC_CONF=", "unset PYTORCH_CUDA_ALLOC_CONF"))
    assert line in text
    assert f"    {line}\n" in err
    assert "covers the job only up to the failing request" in err
    assert "a request of 400.00 MiB failed with 800.00 MiB available" in err
    frames = ["lib/torch/nn/functional.py:5 in linear", "model.py:44 in head",
              "train.py:42 in step", "train.py:90 in main"]
    assert "\n".join(f"    {fr}" for fr in frames) in err
    for name in ("snapshot.pickle.gz", "advice.txt", "advice.json"):
        assert str(folder / name) in err
    assert h.advised == err
    h.stop()
    calls.observers[0](0, 400 * MiB, GiB, 200 * MiB)  # stopped: silent
    assert capsys.readouterr().err == ""


def test_a_memory_fraction_and_fit_set_the_limit_advised(monkeypatch, tmp_path, capsys):
    gbt, calls = _fake_torch(monkeypatch, _oom_snapshot())
    gbt.watch(directory=str(tmp_path / "a"))
    calls.observers[0](0, 400 * MiB, 700 * MiB, 200 * MiB)  # a fraction allows 700 MiB
    doc = json.loads((tmp_path / "a" / "advice.json").read_text())
    assert doc["fit_limits_bytes"] == [700 * MiB]
    capsys.readouterr()
    gbt.watch(directory=str(tmp_path / "b"), fit="1GiB")
    assert len(calls.observers) == 1  # one observer for every watch: PyTorch cannot detach
    calls.observers[0](0, 400 * MiB, 700 * MiB, 200 * MiB)
    doc = json.loads((tmp_path / "b" / "advice.json").read_text())
    assert doc["fit_limits_bytes"] == [GiB]
    assert "the limit asked for" in capsys.readouterr().err


def test_the_default_folder_is_new_and_timestamped(monkeypatch, tmp_path, capsys):
    gbt, calls = _fake_torch(monkeypatch, _oom_snapshot())
    monkeypatch.chdir(tmp_path)
    gbt.watch()
    calls.observers[0](0, 400 * MiB, GiB, 200 * MiB)
    (folder,) = [p for p in os.listdir(tmp_path) if p.startswith("gpu_basics_oom_")]
    assert len(folder) == len("gpu_basics_oom_YYYYmmdd-HHMMSS")
    assert sorted(os.listdir(tmp_path / folder)) == ["advice.json", "advice.txt",
                                                     "snapshot.pickle.gz"]
    assert _oom.new_directory(None) != folder  # the same second: another folder
    assert folder in capsys.readouterr().err


@pytest.mark.parametrize("failure", [RuntimeError("boom\nsecond line"),
                                     ValueError("bad"), KeyboardInterrupt()])
def test_a_failure_inside_the_observer_is_one_line_and_never_raised(
        monkeypatch, tmp_path, capsys, failure):
    gbt, calls = _fake_torch(monkeypatch, failure)
    gbt.watch(directory=str(tmp_path))
    assert calls.observers[0](0, 400 * MiB, GiB, 200 * MiB) is None
    err = capsys.readouterr().err
    assert err.startswith(f"gpu_basics.watch: no advice: {type(failure).__name__}")
    assert err.count("\n") == 1


def test_a_snapshot_the_library_refuses_is_one_line(monkeypatch, tmp_path, capsys):
    gbt, calls = _fake_torch(monkeypatch, {"segments": [], "device_traces": [[]]})
    gbt.watch(directory=str(tmp_path))
    calls.observers[0](0, 400 * MiB, GiB, 200 * MiB)
    err = capsys.readouterr().err
    assert err.startswith("gpu_basics.watch: no advice: ValueError: ")
    assert err.count("\n") == 1


def test_sizes_are_read_as_advise_reads_them():
    assert _oom.parse_size("24GiB") == 24 * GiB
    assert _oom.parse_size("9.5GB") == 9_500_000_000
    assert _oom.parse_size(1024) == 1024
    assert _oom.parse_size(None) is None
    for bad in ("", "GiB", "-1GiB", "3 parsecs", True, 1.5):
        with pytest.raises((ValueError, TypeError)):
            _oom.parse_size(bad)
    assert _native.ABI_VERSION == 4


def _own_snapshot():
    """What gpu-basics' allocator writes at its out-of-memory error (gpu_basics_torch_write_snapshot):
    the history ends in an oom entry without frames or device_free."""
    s = _oom_snapshot()
    for e in s["device_traces"][0]:
        e["frames"] = []
    s["device_traces"][0][-1]["device_free"] = 0
    return s


def test_our_allocators_out_of_memory_is_advised_from_its_own_history(monkeypatch, tmp_path,
                                                                       capsys):
    gbt, _ = _fake_torch(monkeypatch)
    lib = gpu_basics.Library()
    written = []

    def write_snapshot(device, path):
        written.append(device)
        with open(path, "wb") as f:
            pickle.dump(_own_snapshot(), f)
    monkeypatch.setattr(lib, "write_snapshot", write_snapshot)
    handler = gbt._OwnOom(lib, str(tmp_path))
    assert handler(0, 400 * MiB, 800 * MiB, 200 * MiB) is None
    err = capsys.readouterr().err
    assert written == [0]
    doc = json.loads((tmp_path / "advice.json").read_text())
    assert doc["fit_limits_bytes"] == [800 * MiB]
    assert f"    {doc['recommended']['gbt']}\n" in err and "gbt.use(conf=" in err
    assert "with gpu-basics' allocator" in err
    assert "covers the job only up to the failing request" in err
    assert "no Python frames" in err
    for size in (300 * MiB, 300 * MiB, 200 * MiB, 100 * MiB):  # advised up to 3 times
        handler(0, size, 800 * MiB, 200 * MiB)
    err = capsys.readouterr().err
    assert err.count("advised already") == 1 and err.count("apply:") == 2
    assert "advice 3 of at most 3 in this job: a later out-of-memory error prints one line.\n" in err
    assert err.endswith(f"3 advices given already, the most in this job; the last is in "
                        f"{tmp_path}-3\n")
    assert os.path.exists(f"{tmp_path}-2/advice.json")
    broken = gbt._OwnOom(lib, str(tmp_path / "x"))
    monkeypatch.setattr(lib, "write_snapshot", lambda d, p: lib._check(-2, "write_snapshot"))
    assert broken(0, 1, 2, 3) is None
    assert capsys.readouterr().err.startswith("gpu_basics.watch: no advice: GpuBasicsError")


def test_use_with_on_oom_advise_keeps_history_and_sets_the_callback(monkeypatch):
    gbt, _ = _fake_torch(monkeypatch)
    gbt._torch.cuda.is_initialized = lambda: False
    with pytest.raises(ValueError, match="on_oom='always'"):
        gbt.use(on_oom="always")
    installed = []

    class Pluggable:
        def __init__(self, path, alloc, free):
            self.path = path

        def allocator(self):
            return types.SimpleNamespace()
    gbt._torch.cuda.memory.CUDAPluggableAllocator = Pluggable
    gbt._torch.cuda.memory.change_current_allocator = installed.append
    callbacks, configured = [], []
    monkeypatch.setattr(_native.Library, "set_oom_callback",
                        lambda self, fn: callbacks.append(fn))
    monkeypatch.setattr(_native.Library, "configure",
                        lambda self, conf, history=0: configured.append((conf, history)))
    monkeypatch.delenv("GPU_BASICS_ALLOC_CONF", raising=False)
    gbt.use(on_oom="advise")
    assert len(installed) == 1
    (cb,) = callbacks
    assert isinstance(cb, gbt._OwnOom)
    # history defaults to 100000 events: the allocator keeps them for the snapshot
    assert configured == [("", 100_000)]
    with pytest.raises(gpu_basics.GpuBasicsError, match="called already"):
        gbt.use(on_oom="advise")


def test_the_out_of_memory_callback_is_set_and_cleared_through_ctypes():
    lib = gpu_basics.Library()
    lib.set_oom_callback(lambda device, size, allowed, free: None)
    lib.set_oom_callback(None)


def _oom_again(observer, size):
    """An out-of-memory error from one place in the code (one Python stack) of `size` bytes."""
    observer(0, size, GiB, 200 * MiB)


def test_an_error_caught_and_recovered_from_does_not_spend_the_advice(monkeypatch, tmp_path,
                                                                      capsys):
    # cuDNN's workspace retried smaller, or a try/except that halves the batch: the job goes on,
    # and the error that ends it, later, is advised too
    gbt, calls = _fake_torch(monkeypatch, _oom_snapshot())
    h = gbt.watch(directory=str(tmp_path / "oom"))
    _oom_again(calls.observers[0], 400 * MiB)  # caught by the job
    first = capsys.readouterr().err
    assert "apply:" in first and h.advice_count == 1
    _oom_again(calls.observers[0], 200 * MiB)  # the batch halved: the error that ends the job
    err = capsys.readouterr().err
    assert "apply:" in err and "written" in err and h.advice_count == 2
    assert h.advised == err
    assert str(tmp_path / "oom-2" / "advice.json") in err
    assert json.loads((tmp_path / "oom-2" / "advice.json").read_text())["command"] == "advise"


def test_the_same_request_is_advised_once_and_the_count_is_capped(monkeypatch, tmp_path, capsys):
    gbt, calls = _fake_torch(monkeypatch, _oom_snapshot())
    h = gbt.watch(directory=str(tmp_path / "oom"), max_advice=2)
    for _ in range(3):  # a loop that retries the same request as it was
        _oom_again(calls.observers[0], 400 * MiB)
    err = capsys.readouterr().err
    assert err.count("apply:") == 1 and err.count("advised already (not advised again)") == 2
    assert h.advice_count == 1
    _oom_again(calls.observers[0], 350 * MiB)  # another size: another request
    err = capsys.readouterr().err
    assert "apply:" in err and "advice 2 of at most 2" in err and h.advice_count == 2
    calls.observers[0](0, 100 * MiB, GiB, 200 * MiB)  # past the cap: one line
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "2 advices given already" in err
    assert "watch(max_advice=...)" in err and str(tmp_path / "oom-2") in err
    with pytest.raises(ValueError, match="max_advice"):
        gbt.watch(max_advice=0)


def test_an_out_of_memory_error_while_another_is_advised_is_one_line(monkeypatch, tmp_path,
                                                                     capsys):
    gbt, calls = _fake_torch(monkeypatch, _oom_snapshot())
    h = gbt.watch(directory=str(tmp_path))
    h.budget._busy.acquire()  # another thread's advice in progress
    _oom_again(calls.observers[0], 400 * MiB)
    h.budget._busy.release()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "another thread's advice" in err and h.advice_count == 0


def test_the_request_stack_is_the_callers_without_the_package():
    def here():
        return _oom.request_stack()
    stack = here()
    assert stack[0] == (__file__, here.__code__.co_firstlineno + 1)
    assert not any(os.sep + "gpu_basics" + os.sep in f for f, _ in stack)
