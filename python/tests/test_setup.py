"""setup.py's choice of allocator library for the Python running pip, without PyTorch: a stand-in
"python" answers the torch probe, a stand-in cmake builds or fails, and the commands, the bundled
files and the one line said are checked. cmake/torch.cmake following a new Python is checked with
stand-in torches in a scratch project (where cmake is installed)."""
import importlib.util
import json
import os
import shutil
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def load_setup():
    spec = importlib.util.spec_from_file_location("gpu_basics_setup",
                                                  os.path.join(REPO, "python", "setup.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # not as __main__: setup() is not run
    return module


S = load_setup()


def script(path, body):
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def stand_in_python(tmp_path, version="2.9.1+cu130", torch_dir=None, abi=1):
    torch_dir = torch_dir or str(tmp_path / "site-packages" / "torch")
    answer = json.dumps({"version": version, "dir": torch_dir, "cxx11_abi": abi})
    return script(tmp_path / "python", f"echo '{answer}'\n"), torch_dir


def build_tree(tmp_path, built_for=None, cache=True):
    """A build tree with the plain library, a c10 one built for `built_for` (version, dir), and
    a CMakeCache.txt naming the repository."""
    build = tmp_path / "build"
    lib = build / "src" / "torch_alloc"
    lib.mkdir(parents=True)
    (lib / S.LIBRARIES[0]).write_bytes(b"plain")
    if built_for:
        (lib / S.C10_LIB).write_bytes(b"c10")
        (lib / S.C10_JSON).write_text(json.dumps(
            {"torch": built_for[0], "cxx11_abi": 1, "torch_dir": built_for[1]}))
    if cache:
        (build / "CMakeCache.txt").write_text(
            "# comment\nCMAKE_COMMAND:INTERNAL=/usr/bin/cmake\n"
            f"CMAKE_HOME_DIRECTORY:INTERNAL={REPO}\n")
    return str(build)


def names(libs):
    return sorted(os.path.basename(p) for p in libs)


def test_the_torch_probe_reads_the_answer_or_says_why_not(tmp_path):
    python, torch_dir = stand_in_python(tmp_path)
    assert S.torch_of(python) == ({"version": "2.9.1+cu130", "dir": torch_dir, "cxx11_abi": 1},
                                  None)
    none = script(tmp_path / "none", "echo \"ModuleNotFoundError: No module named 'torch'\" >&2\n"
                                     "exit 1\n")
    assert S.torch_of(none) == (None, "`import torch` failed: ModuleNotFoundError: No module "
                                      "named 'torch'")
    slow = script(tmp_path / "slow", "exec sleep 10\n")
    assert S.torch_of(slow, timeout=0.5) == (None, "`import torch` took over 0.5 s")
    garbage = script(tmp_path / "garbage", "echo hello\n")
    assert "unreadable answer" in S.torch_of(garbage)[1]
    assert "cannot run" in S.torch_of(str(tmp_path / "missing"))[1]


def test_a_python_with_torch_builds_the_c10_library_for_it(tmp_path):
    python, torch_dir = stand_in_python(tmp_path)
    for built_for in (None, ("2.8.0", torch_dir), ("2.9.1+cu130", str(tmp_path / "other"))):
        build = build_tree(tmp_path / str(len(str(built_for))), built_for)
        plan = S.c10_plan(build, python, env={"PATH": ""})
        assert plan["action"] == "build", built_for
        assert plan["commands"] == [
            ["/usr/bin/cmake", "-S", REPO, "-B", build, f"-DGPU_BASICS_TORCH_PYTHON={python}",
             f"-DGPU_BASICS_TORCH_DIR={torch_dir}"],
            ["/usr/bin/cmake", "--build", build, "--target", "gpu_basics_torch_alloc_c10"]]
        assert plan["log"] == os.path.join(build, "gpu_basics_c10_build.log")
        assert plan["line"] == f"built the c10 library for torch 2.9.1+cu130 ({torch_dir}) in {build}"


def test_the_cmake_on_path_comes_before_the_caches(tmp_path):
    python, _ = stand_in_python(tmp_path)
    (tmp_path / "bin").mkdir()
    cmake = script(tmp_path / "bin" / "cmake", "exit 0\n")
    plan = S.c10_plan(build_tree(tmp_path), python, env={"PATH": str(tmp_path / "bin")})
    assert plan["commands"][0][0] == cmake


def test_a_c10_library_built_for_this_torch_is_kept(tmp_path):
    python, torch_dir = stand_in_python(tmp_path)
    build = build_tree(tmp_path, ("2.9.1+cu130", torch_dir))
    plan = S.c10_plan(build, python, env={})
    assert plan == {"action": "keep", "torch": S.torch_of(python)[0],
                    "line": f"the c10 library of {build} is built for torch 2.9.1+cu130 "
                            f"({torch_dir})"}
    assert names(S.carry_out(plan, build)) == sorted(S.LIBRARIES)


def test_without_torch_the_build_is_bundled_as_it_is_and_the_line_says_what_to_do(tmp_path):
    none = script(tmp_path / "none", "echo 'ModuleNotFoundError: torch' >&2; exit 1\n")
    build = build_tree(tmp_path, ("2.8.0", "/elsewhere/torch"))
    plan = S.c10_plan(build, none, env={})
    assert plan["action"] == "keep"
    assert plan["line"] == (f"no torch for {none} (`import torch` failed: ModuleNotFoundError: "
                            "torch): torch.OutOfMemoryError needs the c10 library: install torch "
                            "first, then reinstall this package (with --no-build-isolation: "
                            "pip's isolated build does not see it)")
    assert names(S.carry_out(plan, build)) == sorted(S.LIBRARIES)


def test_the_plain_library_alone_where_no_c10_library_can_be_built_or_none_is_wanted(tmp_path):
    python, torch_dir = stand_in_python(tmp_path)
    (tmp_path / "old").mkdir()
    old_abi, _ = stand_in_python(tmp_path / "old", abi=0)
    cases = [
        (python, {"GPU_BASICS_NO_C10": "1"}, True, "warning: GPU_BASICS_NO_C10=1: bundling the "
         "plain library (out of memory raises RuntimeError, not torch.OutOfMemoryError)"),
        (old_abi, {}, True, "uses the pre-C++11 std::string ABI: no c10 library can be built"),
        (python, {}, False, "has no CMakeCache.txt: no c10 library can be built there"),
    ]
    for i, (py, env, cache, line) in enumerate(cases):
        build = build_tree(tmp_path / str(i), ("2.8.0", torch_dir), cache=cache)
        plan = S.c10_plan(build, py, env=env)
        assert plan["action"] == "plain" and line in plan["line"], plan
        assert names(S.carry_out(plan, build)) == [S.LIBRARIES[0]]


def run_plan(tmp_path, cmake_body):
    """c10_plan and carry_out with a stand-in cmake on PATH: (the files, or the SystemExit)."""
    python, torch_dir = stand_in_python(tmp_path)
    (tmp_path / "bin").mkdir()
    script(tmp_path / "bin" / "cmake", cmake_body.replace("TORCH_DIR", torch_dir))
    build = build_tree(tmp_path, ("2.8.0", torch_dir))
    plan = S.c10_plan(build, python, env={"PATH": str(tmp_path / "bin")})
    try:
        return build, S.carry_out(plan, build)
    except SystemExit as e:
        return build, e


def test_a_failed_build_fails_in_one_line_naming_its_log(tmp_path):
    build, err = run_plan(tmp_path, "echo 'CMake Error: no c10' >&2; exit 1\n")
    assert isinstance(err, SystemExit)
    log = os.path.join(build, "gpu_basics_c10_build.log")
    assert str(err) == (f"gpu_basics: building the c10 library for torch 2.9.1+cu130 failed "
                        f"(cmake configure: exit status 1): see {log}; fix it and reinstall, or "
                        "set GPU_BASICS_NO_C10=1 to install the plain library")
    with open(log) as f:
        text = f.read()
    assert text.startswith("$ ") and "-DGPU_BASICS_TORCH_PYTHON=" in text
    assert "CMake Error: no c10" in text


def test_a_failed_compile_names_the_build_step(tmp_path):
    _, err = run_plan(tmp_path, 'case "$1" in --build) exit 2;; esac\n')
    assert "(cmake --build: exit status 2)" in str(err) and "\n" not in str(err)


def test_a_build_that_leaves_no_library_for_this_torch_fails(tmp_path):
    _, err = run_plan(tmp_path, "exit 0\n")
    assert isinstance(err, SystemExit)
    assert "left no c10 library for it" in str(err) and "(found: 2.8.0)" in str(err)


def test_a_build_for_this_torch_is_bundled(tmp_path):
    # The stand-in cmake writes what the real build writes: the library and its JSON.
    body = ('case "$1" in --build)\n'
            '  printf "c10 for me" > "$2/src/torch_alloc/libgpu_basics_torch_alloc_c10.so"\n'
            '  printf \'{"torch": "2.9.1+cu130", "cxx11_abi": 1, "torch_dir": "TORCH_DIR"}\' '
            '> "$2/src/torch_alloc/gpu_basics_torch_alloc_c10.json";;\nesac\n')
    build, libs = run_plan(tmp_path, body)
    assert names(libs) == sorted(S.LIBRARIES)
    with open(os.path.join(build, "src", "torch_alloc", S.C10_LIB)) as f:
        assert f.read() == "c10 for me"


@pytest.mark.skipif(not shutil.which("cmake"), reason="no cmake")
def test_cmake_follows_a_new_python_and_keeps_a_folder_set_by_hand(tmp_path):
    """cmake/torch.cmake: GPU_BASICS_TORCH_DIR taken from the Python's torch changes with
    GPU_BASICS_TORCH_PYTHON (and find_library looks again), one set by hand stays; no default
    path of any machine."""
    pythons = {}
    for name in ("t1", "t2"):
        torch = tmp_path / name / "torch"
        (torch / "lib").mkdir(parents=True)
        (torch / "include" / "c10" / "cuda").mkdir(parents=True)
        for f in ("lib/libc10.so", "lib/libc10_cuda.so",
                  "include/c10/cuda/CUDACachingAllocator.h"):
            (torch / f).write_text("")
        pythons[name] = script(tmp_path / name / "python", f'printf "2.0\\n{torch}\\n1\\n"\n')
    project = tmp_path / "project"
    project.mkdir()
    (project / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.25)\nproject(t LANGUAGES NONE)\n"
        f"include({REPO}/cmake/torch.cmake)\n"
        'message(STATUS "RESULT ${GPU_BASICS_TORCH_DIR} ${GPU_BASICS_C10_LIBRARY}")\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_BASICS_TORCH")}

    def configure(*args):
        out = subprocess.run(["cmake", "-S", str(project), "-B", str(tmp_path / "b"), *args],
                             capture_output=True, text=True, env=env, check=True).stdout
        return [line.split()[2:] for line in out.splitlines() if "RESULT" in line][0]

    t1, t2 = tmp_path / "t1" / "torch", tmp_path / "t2" / "torch"
    assert configure() == []
    assert configure(f"-DGPU_BASICS_TORCH_PYTHON={pythons['t1']}") == [
        str(t1), str(t1 / "lib" / "libc10.so")]
    assert configure(f"-DGPU_BASICS_TORCH_PYTHON={pythons['t2']}") == [
        str(t2), str(t2 / "lib" / "libc10.so")]
    assert configure(f"-DGPU_BASICS_TORCH_DIR={t1}") == [str(t1), str(t1 / "lib" / "libc10.so")]
    assert configure() == [str(t1), str(t1 / "lib" / "libc10.so")]
