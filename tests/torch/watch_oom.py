#!/usr/bin/env python3
"""gpu_basics.torch.watch() and use(on_oom="advise") at a real out-of-memory error, on a GPU.

    python watch_oom.py run --python-dir PYTHON_DIR --lib LIB --work DIR [--json OUT.json]

Each case runs in its own process (this file's `child` mode), with the package from PYTHON_DIR
and the library LIB:

1. native: PyTorch's allocator under a memory fraction of LIMIT (700 MiB), gbt.watch(); 102
   blocks of 6 MiB (three to each 20 MiB segment: 680 MiB reserved), two of each three freed,
   then a 64 MiB request: no segment can be given back (each holds a live block), so PyTorch
   raises torch.OutOfMemoryError. Checked: stderr has the request, the sentence that the trace
   covers the job only up to the failing request, a frame of this file, the line of advice.json's
   recommended.torch_env, and the three files named there.
2. rerun: the same workload, no fraction of its own, started as
       bash -c '<the printed line>'$'\\n''exec "$@"' _ PYTHON THIS child rerun
   Where the advice says a policy fits, the 64 MiB request (the workload's last) must succeed.
3. ours: gpu-basics' allocator, gbt.use(library=LIB, on_oom="advise"), the same fraction and
   workload: stderr has the advice with the gbt.use(conf=...) line. Then that line, exactly as
   advice.json's recommended.gbt has it, is run in place of the job's own use() (the library
   from GPU_BASICS_TORCH_ALLOC_LIB, as a user's environment would name it), under the same
   fraction: the 64 MiB request must succeed.
4. overhead (information, never a failure): a small MLP's training step, in ms, with PyTorch's
   allocator without history and under watch() (max_entries=100000), 200 steps each after 20.

Exit 0 when every check holds, 1 when one fails, 77 (skipped) without PyTorch or a GPU.
"""
import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import time

MIB = 1 << 20
LIMIT = 700 * MIB
HERE = os.path.abspath(__file__)


def workload(torch):
    """The fragmenting workload: returns normally only if the last request fits."""
    blocks = [torch.empty(6 * MIB, dtype=torch.uint8, device="cuda") for _ in range(102)]
    keep = [b for i, b in enumerate(blocks) if i % 3 == 2]
    del blocks
    big = torch.empty(64 * MIB, dtype=torch.uint8, device="cuda")  # the failing request
    return keep, big


def set_limit(torch):
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(LIMIT / total, 0)


def child(mode: str, work: str, lib: str) -> int:
    import torch
    import gpu_basics.torch as gbt
    if mode == "overhead":
        model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(),
                                    torch.nn.Linear(4096, 1024)).cuda()
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        x = torch.randn(256, 1024, device="cuda")

        def steps(n):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(n):
                opt.zero_grad(set_to_none=True)
                model(x).square().mean().backward()
                opt.step()
            torch.cuda.synchronize()
            return (time.perf_counter() - t0) / n * 1e3
        steps(20)
        plain = steps(200)
        with gbt.watch(max_entries=100_000):
            steps(20)
            watched = steps(200)
        print(json.dumps({"plain_ms": plain, "watched_ms": watched}))
        return 0
    if mode == "ours":
        gbt.use(library=lib, on_oom="advise")
        os.chdir(work)
    elif mode == "ours_rerun":  # the printed line, run as printed (the library from the env)
        line = os.environ["WATCH_OOM_LINE"]
        print(f"running: {line}", flush=True)
        exec(line, {"gbt": gbt})
    elif mode == "native":
        gbt.watch(directory=os.path.join(work, "native_oom"))
    # The rerun keeps the same memory: the fraction unless the printed line sets its own.
    if mode != "rerun" or "per_process_memory_fraction" not in os.environ.get(
            "PYTORCH_CUDA_ALLOC_CONF", ""):
        set_limit(torch)
    try:
        workload(torch)
    except (torch.OutOfMemoryError, RuntimeError) as e:
        print(f"OOM: {str(e).splitlines()[0]}", flush=True)
        return 3
    print("fits", flush=True)
    return 0


def run_child(mode, args, env=None, prefix=()):
    cmd = [*prefix, sys.executable, HERE, "child", mode, "--work", args.work, "--lib", args.lib]
    e = {k: v for k, v in (env or os.environ).items()
         if k not in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "GPU_BASICS_ALLOC_CONF")
         or env is not None}
    e["PYTHONPATH"] = os.pathsep.join(p for p in (args.python_dir, e.get("PYTHONPATH")) if p)
    e["GPU_BASICS_TORCH_ALLOC_LIB"] = args.lib
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, env=e, timeout=150)
    except subprocess.TimeoutExpired as t:
        p = subprocess.CompletedProcess(cmd, 124, t.stdout or "", t.stderr or "")
        if isinstance(p.stdout, bytes):
            p.stdout, p.stderr = p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")
    print(f"$ {' '.join(shlex.quote(c) for c in cmd)}\n  rc {p.returncode}\n  "
          + (p.stdout + p.stderr).strip().replace("\n", "\n  "), flush=True)
    return p


def check_advice(err: str, folder: str, key: str, failures: list, what: str,
                 named: str = "") -> dict:
    doc = {}
    path = os.path.join(folder, "advice.json")
    if not os.path.isfile(path):
        failures.append(f"{what}: no {path}")
        return doc
    with open(path) as f:
        doc = json.load(f)
    line = doc["recommended"][key]
    for want in ("a request of 64.00 MiB failed",
                 "covers the job only up to the failing request", f"    {line}\n",
                 os.path.join(named or folder, "snapshot.pickle.gz"),
                 os.path.join(named or folder, "advice.txt")):
        if want not in err:
            failures.append(f"{what}: stderr lacks {want!r}")
    return doc


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["run", "child"])
    p.add_argument("child_mode", nargs="?")
    p.add_argument("--python-dir", default="")
    p.add_argument("--lib", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--json")
    args = p.parse_args()
    os.makedirs(args.work, exist_ok=True)
    if args.mode == "child":
        return child(args.child_mode, args.work, args.lib)
    try:
        import torch
        if not torch.cuda.is_available():
            print("skipped: PyTorch sees no GPU")
            return 77
    except ImportError:
        print("skipped: no PyTorch")
        return 77
    failures, report = [], {}
    for d in os.listdir(args.work):  # no advice of an earlier run may pass for this one's
        if d == "native_oom" or d.startswith("gpu_basics_oom_"):
            shutil.rmtree(os.path.join(args.work, d))

    native = run_child("native", args)
    folder = os.path.join(args.work, "native_oom")
    if native.returncode != 3:
        failures.append(f"native: expected an out-of-memory error, rc {native.returncode}")
    doc = check_advice(native.stderr, folder, "torch_env", failures, "native")
    if "watch_oom.py:" not in native.stderr:
        failures.append("native: no frame of the workload printed")
    report["native"] = {"line": doc.get("recommended", {}).get("torch_env"),
                        "fit_choice": doc.get("fit_choice")}

    if doc:
        line = doc["recommended"]["torch_env"]
        env = {k: v for k, v in os.environ.items() if k != "PYTORCH_CUDA_ALLOC_CONF"}
        env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
        rerun = run_child("rerun", args, env,
                          prefix=("bash", "-c", line + "\nexec \"$@\"", "_"))
        report["rerun"] = {"rc": rerun.returncode, "stdout": rerun.stdout.strip()}
        if (doc.get("fit_choice") or [None])[0] is None:
            failures.append("native: the advice found no policy that fits the memory available")
        elif rerun.returncode != 0:
            failures.append(f"rerun with {line!r}: the failing request still fails "
                            f"(rc {rerun.returncode})")

    ours = run_child("ours", args)
    report["ours"] = {"rc": ours.returncode}
    dirs = sorted(d for d in os.listdir(args.work) if d.startswith("gpu_basics_oom_"))
    if ours.returncode != 3:
        failures.append(f"ours: expected an out-of-memory error, rc {ours.returncode}")
    if not dirs:
        failures.append("ours: no gpu_basics_oom_* folder written")
    else:
        # The child ran in the work directory: it names its new folder relative to it.
        doc = check_advice(ours.stderr, os.path.join(args.work, dirs[-1]), "gbt", failures,
                           "ours", named=dirs[-1])
        if "with gpu-basics' allocator" not in ours.stderr:
            failures.append("ours: stderr does not name gpu-basics' allocator")
        # The printed gbt.use(...) line, run as printed in place of the job's own use(), with the
        # same fraction and workload: the failing request must now fit.
        line = (doc.get("recommended") or {}).get("gbt") if doc else None
        if line:
            env = {k: v for k, v in os.environ.items()
                   if k not in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF",
                                "GPU_BASICS_ALLOC_CONF")}
            env["WATCH_OOM_LINE"] = line
            again = run_child("ours_rerun", args, env)
            report["ours_rerun"] = {"line": line, "rc": again.returncode,
                                    "stdout": again.stdout.strip()}
            last = (again.stdout.strip().splitlines() or [""])[-1]
            if again.returncode != 0 or last != "fits":
                failures.append(f"ours rerun with {line!r}: the failing request still fails "
                                f"(rc {again.returncode})")
        else:
            failures.append("ours: advice.json recommends no gbt line to rerun")

    over = run_child("overhead", args)
    try:
        report["overhead"] = json.loads(over.stdout.strip().splitlines()[-1])
        o = report["overhead"]
        print(f"training step: {o['plain_ms']:.3f} ms without history, {o['watched_ms']:.3f} ms "
              f"under watch() ({(o['watched_ms'] / o['plain_ms'] - 1) * 100:+.1f}%)")
    except (ValueError, IndexError, KeyError):
        report["overhead"] = None
        print("overhead: not measured (see the child's output above)")

    report["failures"] = failures
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    for f in failures:
        print("FAIL:", f)
    print("watch_oom:", "ok" if not failures else f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
