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
    assert info["library"] == os.path.basename(info["path"])
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
    counters = {k: v for k, v in ours.items() if isinstance(v, dict)}
    ours.update(small_pool=counters, large_pool={k: stat(0, 0, 0, 0) for k in counters})
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


# PyTorch's memory_stats() names (torch/cuda/memory.py), written out here rather than taken from
# the package, so that a renamed or missing key fails.
_PYTORCH_STATS = ("allocated_bytes", "reserved_bytes", "active_bytes", "inactive_split_bytes",
                  "requested_bytes", "allocation", "segment", "active", "inactive_split")
_PYTORCH_POOLS = ("all", "small_pool", "large_pool")
_PYTORCH_FIELDS = ("current", "peak", "allocated", "freed")
_OUR_STATS = ("allocated_bytes", "reserved_bytes", "active_bytes", "inactive_split_bytes",
              "requested_bytes", "allocation_count", "segment_count", "active_count",
              "inactive_split_count")  # the library's JSON, in the order of _PYTORCH_STATS


def _pool_json(seed):
    """Counters as the library writes them, each value distinct: seed, stat, field."""
    return {mine: {f: seed * 10000 + i * 10 + j for j, f in enumerate(_PYTORCH_FIELDS)}
            for i, mine in enumerate(_OUR_STATS)}


def test_pool_keys_are_pytorchs_and_carry_the_librarys_pool_counters(monkeypatch):
    gbt = _stub_torch(monkeypatch)
    small, large = _pool_json(1), _pool_json(2)
    ours = _pool_json(3)  # both pools' counters (the library writes their sums there)
    ours.update(small_pool=small, large_pool=large, alloc_retries=0, ooms=0)
    s = gbt.torch_stats(json.loads(json.dumps(ours)))
    want = {f"{stat}.{pool}.{f}" for stat in _PYTORCH_STATS for pool in _PYTORCH_POOLS
            for f in _PYTORCH_FIELDS}
    have = {k for k in s if k.split(".")[0] in _PYTORCH_STATS}
    assert have == want, (sorted(have - want), sorted(want - have))
    for theirs, mine in zip(_PYTORCH_STATS, _OUR_STATS):
        for pool, counters in (("all", ours), ("small_pool", small), ("large_pool", large)):
            for f in _PYTORCH_FIELDS:
                assert s[f"{theirs}.{pool}.{f}"] == counters[mine][f], (theirs, pool, f)
    assert list(s) == sorted(s)
    # Nothing allocated yet: every key, pools included, at zero.
    zero = gbt.torch_stats(None)
    assert set(zero) == set(s)
    assert zero["allocated_bytes.small_pool.peak"] == zero["segment.large_pool.current"] == 0


def test_a_library_without_pool_counters_gives_only_the_all_keys(monkeypatch):
    gbt = _stub_torch(monkeypatch)
    old = _pool_json(3)  # a library older than the pool counters writes no small/large_pool
    s = gbt.torch_stats(old)
    assert not [k for k in s if ".small_pool." in k or ".large_pool." in k]
    assert s["allocated_bytes.all.peak"] == old["allocated_bytes"]["peak"]
    assert s["inactive_split.all.freed"] == old["inactive_split_count"]["freed"]
    assert len([k for k in s if ".all." in k]) == len(_PYTORCH_STATS) * len(_PYTORCH_FIELDS)


def _no_control_characters(text):
    assert not any(ord(c) < 32 or ord(c) == 127 for c in text), repr(text)


def test_a_conf_with_a_nul_or_not_a_str_is_refused_in_one_line():
    lib = gpu_basics.Library()
    with pytest.raises(ValueError, match=r"NUL character \(\\x00\) at offset 24") as e:
        gpu_basics.check_conf("expandable_segments:True\x00garbage:zzz")
    _no_control_characters(str(e.value))
    assert "garbage:zzz" in str(e.value)
    with pytest.raises(ValueError, match="NUL"):
        lib.configure("expandable_segments:True\x00garbage:zzz")
    for bad in (None, b"expandable_segments:True", 3):
        with pytest.raises(TypeError, match="expected a str, got " + type(bad).__name__):
            gpu_basics.check_conf(bad)
    with pytest.raises(TypeError, match="expected a str"):
        lib.check_conf(None)
    lib.configure(None)  # configure(None) is the defaults, as use() passes it
    assert lib.conf() == ""


def test_library_messages_carry_no_raw_control_characters():
    for conf, shown in (("foo\x1b:1", "'foo\\x1b'"), ("expandable_segments:\x1b[31mTrue", None),
                        ("expandable_segments:True\n", "'True\\n'"), ("foo\x7f:1", "'foo\\x7f'")):
        with pytest.raises(ValueError) as e:
            gpu_basics.check_conf(conf)
        _no_control_characters(str(e.value))
        if shown:
            assert shown in str(e.value), str(e.value)
    assert _native.printable("a\x1b[0m\tb\x00\u00e9") == "a\\x1b[0m\\tb\\x00\u00e9"


def test_a_library_path_that_is_not_a_regular_file_says_so(monkeypatch, tmp_path):
    for path in ("/dev/null", str(tmp_path)):
        monkeypatch.setenv(_native.ENV_LIB, path)
        with pytest.raises(gpu_basics.LibraryNotFound, match=f"{path}: not a regular file$"):
            gpu_basics.Library()
        monkeypatch.delenv(_native.ENV_LIB)
        with pytest.raises(gpu_basics.LibraryNotFound, match="not a regular file"):
            gpu_basics.Library(path)
    monkeypatch.setenv(_native.ENV_LIB, str(tmp_path / "no\x1bpe.so"))
    with pytest.raises(gpu_basics.LibraryNotFound, match=r"no\\x1bpe.so: no such file") as e:
        gpu_basics.Library()
    _no_control_characters(str(e.value))


# ---- the gpu-basics command (console script and python -m gpu_basics) ---------------------------

def _run_module(args, **env):
    full = dict(os.environ, **env)
    full["PYTHONPATH"] = os.pathsep.join(p for p in (_python_dir(), full.get("PYTHONPATH")) if p)
    return subprocess.run([sys.executable, "-m", "gpu_basics", *args], env=full,
                          capture_output=True, text=True, timeout=60)


def _python_dir():
    return os.path.dirname(os.path.dirname(os.path.abspath(gpu_basics.__file__)))


def test_python_m_gpu_basics_runs_the_executable_with_the_same_arguments(tmp_path):
    fake = tmp_path / "gpu-basics"
    fake.write_text('#!/bin/sh\necho "fake $*"\nexit 7\n')
    fake.chmod(0o755)
    out = _run_module(["advise", "--fit", "a b"], GPU_BASICS_CLI=str(fake))
    assert (out.returncode, out.stdout) == (7, "fake advise --fit a b\n"), out.stderr


def test_a_missing_executable_is_one_line_and_exit_status_2(monkeypatch, tmp_path, capsys):
    out = _run_module(["--version"], GPU_BASICS_CLI=str(tmp_path / "none"))
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.count("\n") == 1 and "none': not an executable file" in out.stderr
    not_executable = tmp_path / "gpu-basics"
    not_executable.write_text("#!/bin/sh\n")
    out = _run_module(["--version"], GPU_BASICS_CLI=str(not_executable))
    assert out.returncode == 2 and "not an executable file" in out.stderr
    from gpu_basics import _cli
    monkeypatch.delenv(_cli.ENV_CLI, raising=False)
    monkeypatch.setattr(_cli, "candidates", lambda: [str(tmp_path / "_bin" / "gpu-basics")])
    assert _cli.main(["--version"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpu-basics: no bundled gpu-basics executable in ") and err.count("\n") == 1
    assert "scripts/build.sh" in err


def test_the_console_script_and_the_bundled_files_are_declared():
    tomllib = pytest.importorskip("tomllib")
    with open(os.path.join(_python_dir(), "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)
    assert project["project"]["scripts"] == {"gpu-basics": "gpu_basics._cli:main"}
    assert "_bin/*" in project["tool"]["setuptools"]["package-data"]["gpu_basics"]


# ---- setup.py: what it refuses, in one line, before building anything -----------------------

def _setup_py(tmp_path, argv, prelude="", **env):
    code = (f"import runpy, sys\n{prelude}"
            f"sys.argv = ['setup.py'] + {argv!r}\n"
            f"runpy.run_path({os.path.join(_python_dir(), 'setup.py')!r}, run_name='__main__')\n")
    return subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, env=dict(os.environ, **env))


def test_setup_refuses_a_tree_without_a_built_library_in_one_line(tmp_path):
    empty = tmp_path / "build"
    empty.mkdir()
    out = _setup_py(tmp_path, ["dist_info", "--output-dir", str(tmp_path)],
                    GPU_BASICS_BUILD_DIR=str(empty))
    assert out.returncode == 1
    assert out.stderr == (f"gpu_basics: no built library in {empty}: run scripts/build.sh first, "
                          "or set GPU_BASICS_BUILD_DIR (or GPU_BASICS_ALLOW_NO_LIBRARY=1 where "
                          "GPU_BASICS_TORCH_ALLOC_LIB will name one at run time)\n")


def test_setup_without_wheel_says_what_to_install_in_one_line(tmp_path):
    hide = ("sys.modules['wheel'] = None\n"
            "sys.modules['setuptools.command.bdist_wheel'] = None\n")
    for command in ("dist_info", "bdist_wheel"):
        out = _setup_py(tmp_path, [command], prelude=hide)
        assert out.returncode == 1, out
        assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr, out.stderr
        assert "needs the `wheel` package" in out.stderr
        assert "install python3-wheel (Debian) or run `pip install wheel`" in out.stderr


def test_setup_refuses_a_cli_of_another_version_in_one_line(tmp_path):
    build = tmp_path / "build"
    (build / "src" / "torch_alloc").mkdir(parents=True)
    (build / "src" / "torch_alloc" / "libgpu_basics_torch_alloc.so").write_text("not loaded")
    cli = build / "gpu-basics"
    cli.write_text('#!/bin/sh\necho "gpu-basics 0.0.1 (abc)"\n')
    cli.chmod(0o755)
    out = _setup_py(tmp_path, ["dist_info", "--output-dir", str(tmp_path)],
                    GPU_BASICS_BUILD_DIR=str(build))
    assert out.returncode == 1
    assert out.stderr == (f"gpu_basics: {cli} is version 0.0.1, this tree is "
                          f"{gpu_basics.__version__}: rebuild (scripts/build.sh), or set "
                          "GPU_BASICS_BUILD_DIR to a build of this tree\n")
