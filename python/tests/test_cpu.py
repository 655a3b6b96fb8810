"""The package on a machine without PyTorch or a GPU (CI): loading the library, conf strings,
statistics in PyTorch's names, the summary table, and clear errors where CUDA or PyTorch is
absent. The GPU side is tests/torch/conformance.py, run against PyTorch on the H200."""
import json
import os
import subprocess
import sys
import types

import pytest

import gpu_basics
from gpu_basics import _native


def test_library_is_found_and_reports_what_it_was_built_for():
    info = gpu_basics.build_info()
    assert os.path.isfile(info["path"])
    assert info["abi_version"] == _native.ABI_VERSION
    if info["torch"] is None:
        assert info["oom_exception"] == "std::bad_alloc"
    else:
        assert info["oom_exception"] == "c10::OutOfMemoryError"


def test_conf_strings_are_normalised_or_refused_with_the_bad_part():
    assert gpu_basics.check_conf("") == ""
    assert gpu_basics.check_conf("expandable_segments:True") == "expandable_segments:True"
    assert (gpu_basics.check_conf("page_release:eager, expandable_segments:True")
            == "expandable_segments:True,page_release:eager")
    with pytest.raises(ValueError, match="max_split_size_mb: expected an integer > 20"):
        gpu_basics.check_conf("max_split_size_mb:3")
    with pytest.raises(ValueError, match="unknown key 'expandable'"):
        gpu_basics.check_conf("expandable:True")
    with pytest.raises(ValueError, match="page_release: expected deferred, eager or keep"):
        gpu_basics.check_conf("page_release:never")


def test_every_registered_key_is_set_and_read_back_through_configure():
    # gbt.use(conf=...) hands conf to configure(); build_info()["conf"] reads it back. The keys
    # come from the library's registry, so a new key is covered as soon as it is registered.
    lib = gpu_basics.Library()
    keys = lib.conf_keys()
    names = {k["name"] for k in keys}
    assert {"max_split_size_mb", "roundup_power2_divisions", "garbage_collection_threshold",
            "expandable_segments", "page_release", "thread_cache_blocks"} <= names
    try:
        for k in keys:
            conf = f"{k['name']}:{k['example']}"
            want = "" if k["ignored"] else conf
            assert gpu_basics.check_conf(conf) == want, conf
            lib.configure(conf)
            assert lib.conf() == want, conf
            with pytest.raises(ValueError, match=k["name"]):
                lib.configure(f"{k['name']}:not-a-value")
    finally:
        lib.configure("")


def test_a_missing_library_is_one_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv(_native.ENV_LIB, str(tmp_path / "nope.so"))
    with pytest.raises(gpu_basics.LibraryNotFound, match="nope.so: no such file"):
        gpu_basics.Library()
    not_a_library = tmp_path / "libfake.so"
    not_a_library.write_text("hello")
    monkeypatch.setenv(_native.ENV_LIB, str(not_a_library))
    with pytest.raises(gpu_basics.GpuBasicsError, match="cannot be loaded"):
        gpu_basics.Library()


def test_no_gpu_is_a_clear_error_not_a_crash():
    # A child process: CUDA reads CUDA_VISIBLE_DEVICES once, at its initialisation.
    code = ("import gpu_basics\n"
            "lib = gpu_basics.Library()\n"
            "try:\n"
            "    lib.try_alloc(1024)\n"
            "except gpu_basics.GpuBasicsError as e:\n"
            "    print('ERROR', e)\n")
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    line = out.stdout.strip()
    assert line.startswith("ERROR gpu_basics allocator: alloc(1024 bytes, device 0): "), line
    assert len(line.splitlines()) == 1


def _stub_torch(monkeypatch, available=False, initialized=False, version="9.9.9", abi=True):
    torch = types.ModuleType("torch")
    torch.__version__ = version
    torch._C = types.SimpleNamespace(_GLIBCXX_USE_CXX11_ABI=abi)
    torch.version = types.SimpleNamespace(cuda="13.0")
    torch.cuda = types.SimpleNamespace(is_available=lambda: available,
                                       is_initialized=lambda: initialized)
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.delitem(sys.modules, "gpu_basics.torch", raising=False)
    import gpu_basics.torch as gbt
    return gbt


def test_torch_missing_is_one_clear_import_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.delitem(sys.modules, "gpu_basics.torch", raising=False)
    with pytest.raises(ImportError, match="gpu_basics.torch needs PyTorch"):
        import gpu_basics.torch  # noqa: F401


def test_use_without_cuda_says_so(monkeypatch):
    gbt = _stub_torch(monkeypatch, available=False)
    with pytest.raises(gpu_basics.GpuBasicsError, match="no CUDA device visible to PyTorch"):
        gbt.use()
    gbt = _stub_torch(monkeypatch, available=True, initialized=True)
    with pytest.raises(gpu_basics.GpuBasicsError, match="must run before CUDA is initialised"):
        gbt.use()
    with pytest.raises(gpu_basics.GpuBasicsError, match=r"call use\(\) \(or mem_pool\(\)\) first"):
        gbt.memory_stats(0)


def _c10_for_another_torch(tmp_path):
    """A _c10 library file whose sidecar says torch 2.10.0+cu128 (never loaded: the check comes
    first)."""
    lib = tmp_path / "libgpu_basics_torch_alloc_c10.so"
    lib.write_text("not loaded: the check comes first")
    (tmp_path / "gpu_basics_torch_alloc_c10.json").write_text(
        json.dumps({"torch": "2.10.0+cu128", "cxx11_abi": 1}))
    return lib


def test_a_c10_library_for_another_torch_is_refused_before_loading(monkeypatch, tmp_path):
    gbt = _stub_torch(monkeypatch, version="2.11.0+cu130")
    lib = _c10_for_another_torch(tmp_path)
    with pytest.raises(gpu_basics.LibraryMismatch) as e:
        gbt._load(str(lib))
    msg = str(e.value)
    assert "built for torch 2.10.0+cu128 (C++11 ABI 1), this is torch 2.11.0+cu130" in msg
    assert "\n" not in msg
    gbt = _stub_torch(monkeypatch, version="2.10.0+cu128", abi=False)
    with pytest.raises(gpu_basics.LibraryMismatch, match="this is torch 2.10.0\\+cu128 \\(C\\+\\+11 ABI 0\\)"):
        gbt._load(str(lib))


def test_auto_falls_back_to_the_plain_library_with_one_warning(monkeypatch, tmp_path):
    gbt = _stub_torch(monkeypatch, version="2.11.0+cu130")
    c10 = _c10_for_another_torch(tmp_path)
    plain = _native.find_library("plain")
    monkeypatch.delenv("GPU_BASICS_TORCH_ALLOC_LIB", raising=False)
    found = {"any": str(c10), "plain": plain}
    monkeypatch.setattr(gbt, "find_library", lambda kind: found[kind])
    with pytest.warns(UserWarning, match=r"built for torch 2.10.0\+cu128.*using libgpu_basics_torch_alloc.so instead"):
        lib = gbt._load("auto")
    assert lib.path == plain and not lib.is_c10
    with pytest.raises(gpu_basics.LibraryMismatch):  # asked for by name: no fallback
        gbt._load(str(c10))
    monkeypatch.setenv("GPU_BASICS_TORCH_ALLOC_LIB", str(c10))  # nor by the environment
    with pytest.raises(gpu_basics.LibraryMismatch):
        gbt._load("auto")
    monkeypatch.delenv("GPU_BASICS_TORCH_ALLOC_LIB")

    def none(kind):
        if kind == "plain":
            raise gpu_basics.LibraryNotFound("no plain library")
        return str(c10)
    monkeypatch.setattr(gbt, "find_library", none)
    with pytest.raises(gpu_basics.LibraryMismatch):
        gbt._load("auto")


def test_statistics_carry_pytorchs_key_names(monkeypatch):
    gbt = _stub_torch(monkeypatch)
    stat = lambda c, p, a, f: {"current": c, "peak": p, "allocated": a, "freed": f}  # noqa: E731
    ours = {"allocated_bytes": stat(512, 2048, 4096, 3584), "requested_bytes": stat(500, 2000, 4000, 3500),
            "reserved_bytes": stat(2 << 20, 4 << 20, 6 << 20, 4 << 20),
            "active_bytes": stat(512, 2048, 4096, 3584), "inactive_split_bytes": stat(0, 1, 2, 2),
            "allocation_count": stat(1, 4, 8, 7), "segment_count": stat(1, 2, 3, 2),
            "active_count": stat(1, 4, 8, 7), "inactive_split_count": stat(0, 1, 1, 1),
            "alloc_retries": 2, "ooms": 1, "device_allocations": 3, "device_frees": 2,
            "device_syncs": 4, "max_split_size_bytes": None, "largest_free_block_bytes": 1536,
            "fragmentation": 0.25, "device_call_ns": 5_000_000, "cached_free_bytes": 2048,
            "cache_claims": 7, "cache_claim_ns": 21_000}
    s = gbt.torch_stats(ours)
    assert (s["gpu_basics.cache_claims"], s["gpu_basics.cache_claim_ns"]) == (7, 21_000)
    assert s["allocated_bytes.all.current"] == 512
    assert s["allocated_bytes.all.peak"] == 2048
    assert s["reserved_bytes.all.freed"] == 4 << 20
    assert s["allocation.all.allocated"] == 8  # PyTorch's name: "allocation", not "allocated"
    assert s["segment.all.current"] == 1
    assert s["inactive_split.all.peak"] == 1
    assert (s["num_alloc_retries"], s["num_ooms"], s["num_device_alloc"], s["num_device_free"],
            s["num_sync_all_streams"], s["max_split_size"]) == (2, 1, 3, 2, 4, -1)
    assert list(s) == sorted(s)
    zero = gbt.torch_stats(None)
    assert set(zero) == set(s) and zero["reserved_bytes.all.peak"] == 0
    text = gbt.summary_text(s, 0, "expandable_segments:True")
    lines = text.splitlines()
    assert all(len(line) == 77 for line in lines), [len(line) for line in lines]
    assert "CUDA OOMs: 1" in text and "cudaMalloc retries: 2" in text
    assert any(line.startswith("| GPU reserved memory   |   2048 KiB |   4096 KiB |") for line in lines)
    assert "expandable_segments:True" in text
