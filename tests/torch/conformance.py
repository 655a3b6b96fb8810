#!/usr/bin/env python3
"""Conformance of gpu-basics' allocator as PyTorch's CUDA allocator (ctest label `gpu`), run with
the Python that has PyTorch. Each case runs in a process of its own (the allocator is installed
before CUDA starts, and some cases end with CUDA in a state of their own):

  conformance.py run --lib LIB [--case NAME]... [--json OUT] [--work DIR]
  conformance.py case NAME --lib LIB [--work DIR]

A case prints what it saw and exits 0 (passed), 1 (failed) or 77 (skipped, with the reason).
`run` exits 1 if any case failed, 77 if PyTorch sees no GPU. Data is random and checked against
a copy kept on the CPU; nothing is judged by pointers alone.
"""
import argparse
import gc
import json
import os
import queue
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "python"))
sys.path.insert(1, os.path.join(REPO, "examples"))

MIB = 1 << 20
GIB = 1 << 30


class Skip(Exception):
    pass


def expect(cond, what):
    if not cond:
        raise AssertionError(what)


def install(args, **kw):
    import gpu_basics.torch as gbt
    info = gbt.use(library=args.lib, **kw)
    print(f"allocator: {os.path.basename(info['path'])}, built for torch {info['torch']}, "
          f"out of memory raises {info['oom_exception']}")
    return gbt


def random_cpu(n, seed):
    import torch
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, generator=g)


# ---- the cases -----------------------------------------------------------------------------

def case_oom(args):
    """A request no device can hold raises torch.OutOfMemoryError with the allocator's figures;
    the process keeps working and the statistics count it."""
    import torch
    gbt = install(args)
    keep_cpu = random_cpu(1 << 20, 1)
    keep = keep_cpu.cuda()
    try:
        torch.empty(400 * GIB, dtype=torch.uint8, device="cuda")
        raise AssertionError("a 400 GiB tensor was allocated")
    except torch.OutOfMemoryError as e:
        msg = str(e).splitlines()[0]
        print(f"torch.OutOfMemoryError: {msg}")
        for part in ("CUDA out of memory", "Tried to allocate 409600.00 MiB", "allocated",
                     "reserved but free", "largest free block", "free of"):
            expect(part in msg, f"{part!r} not in the message")
    stats = gbt.memory_stats()
    expect(stats["num_ooms"] == 1, f"num_ooms {stats['num_ooms']}, expected 1")
    expect(stats["num_alloc_retries"] == 0, "the failed request counted as a retry")
    big_cpu = random_cpu(256 * MIB // 4, 2)
    big = big_cpu.cuda()
    expect(torch.equal(big.cpu(), big_cpu), "1 GiB after the OOM: data differs")
    expect(torch.equal(keep.cpu(), keep_cpu), "a tensor from before the OOM changed")
    print(f"after it: a 1 GiB tensor copied both ways intact; num_ooms {stats['num_ooms']}")


def case_zero_size(args):
    import torch
    gbt = install(args)
    a_cpu = random_cpu(4096, 3)
    a = a_cpu.cuda()
    before = gbt.memory_allocated()
    empties = [torch.empty(0, device="cuda") for _ in range(1000)]
    empties += [torch.empty((0, 7), device="cuda", dtype=torch.bfloat16) for _ in range(100)]
    expect(gbt.memory_allocated() == before, "zero-size tensors took memory")
    expect(all(t.numel() == 0 for t in empties), "numel")
    s = torch.cat([torch.empty(0, device="cuda"), a])
    expect(torch.equal(s.cpu(), a_cpu), "cat with an empty tensor")
    expect(torch.zeros(0, 5, device="cuda").sum().item() == 0.0, "sum of nothing")
    del empties, s
    gc.collect()
    torch.cuda.synchronize()
    expect(gbt.memory_allocated() == before, "memory after freeing them")
    print(f"1100 zero-size tensors: no memory, no error; allocated stays {before} B")


def _stream_hazard(record):
    """A tensor used on a side stream that is still busy (a sleeping kernel first) is freed; an
    allocation of the same size on the default stream is filled at once. Returns (side result
    matches the original, the new tensor took the freed block)."""
    import torch
    n = 64 * MIB // 4
    src_cpu = random_cpu(n, 4)
    src = src_cpu.cuda()
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(400_000_000)  # ~0.2 s on an H200: the clone below waits behind it
        dst = src.clone()
    if record:
        src.record_stream(side)
    ptr = src.data_ptr()
    del src
    z = torch.full((n,), 7.0, device="cuda")
    reused = z.data_ptr() == ptr
    torch.cuda.synchronize()
    return torch.equal(dst.cpu(), src_cpu), reused


def case_record_stream(args):
    """record_stream keeps a block from reuse until the other stream's work is done; the same
    steps without it show the hazard the test looks for (so the test can fail)."""
    install(args)
    intact, reused = _stream_hazard(record=True)
    print(f"with record_stream: side stream's copy intact: {intact}; block reused at once: {reused}")
    expect(intact, "the side stream read memory that was reused before its work was done")
    intact, reused = _stream_hazard(record=False)
    print(f"control, without record_stream: copy intact: {intact}; block reused at once: {reused}")
    expect(not intact and reused, "the control did not show the hazard: the test could not tell")


def case_threads(args):
    """Frees from the autograd engine's threads, tensors freed on other Python threads than the
    one that allocated them, and DataLoader workers with pinned batches."""
    import torch
    gbt = install(args)
    torch.manual_seed(5)
    base = gbt.memory_allocated()
    model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.GELU(),
                                torch.nn.Linear(2048, 512)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    for _ in range(20):  # backward frees saved activations on autograd's device thread
        x = torch.randn(256, 512, device="cuda")
        loss = model(x).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        expect(torch.isfinite(loss).item(), "loss not finite")
    del model, opt, x, loss
    gc.collect()
    torch.cuda.synchronize()
    torch._C._cuda_clearCublasWorkspaces()  # PyTorch keeps one per thread: the autograd one's too
    expect(gbt.memory_allocated() == base, f"after autograd: {gbt.memory_allocated() - base} B left")

    handoff, errors = queue.Queue(), []

    def producer(seed):
        try:
            for i in range(50):
                c = random_cpu(1 + (seed * 7919 + i * 104729) % 300000, seed * 100 + i)
                handoff.put((c, c.cuda()))
        except Exception as e:  # reported below
            errors.append(repr(e))

    def consumer():
        try:
            for _ in range(200):
                c, g = handoff.get(timeout=60)
                if not torch.equal(g.cpu(), c):
                    errors.append("data differs")
                del g  # freed here, allocated on another thread
        except Exception as e:
            errors.append(repr(e))

    threads = [threading.Thread(target=producer, args=(s,)) for s in range(4)]
    threads.append(threading.Thread(target=consumer))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    expect(not errors, f"threads: {errors[:3]}")
    torch.cuda.synchronize()
    expect(gbt.memory_allocated() == base, "after the threads: memory left")

    data = torch.randn(4096, 1024, generator=torch.Generator().manual_seed(6))
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(data), batch_size=256,
                                         num_workers=2, pin_memory=True)
    total = torch.zeros((), dtype=torch.float64, device="cuda")
    seen = 0
    for (b,) in loader:
        expect(b.is_pinned(), "batch not pinned")
        g = b.cuda(non_blocking=True)
        total += g.double().sum()
        seen += b.shape[0]
    expect(seen == data.shape[0], "batches")
    expect(abs(total.item() - data.double().sum().item()) < 1e-6 * data.numel(), "loader sum")
    del loader, total, g, b
    gc.collect()
    torch.cuda.synchronize()
    expect(gbt.memory_allocated() == base, "after the loader: memory left")
    print("autograd: 20 steps, memory back to its start; 4 threads handed 200 tensors to a 5th, "
          "which freed them, data intact; DataLoader (2 workers, pinned): 16 batches summed right")


def case_empty_cache(args):
    import torch
    gbt = install(args)
    ts = [torch.empty(GIB, dtype=torch.uint8, device="cuda") for _ in range(4)]
    del ts
    torch.cuda.synchronize()
    held = gbt.memory_reserved()
    free_before = torch.cuda.mem_get_info()[0]
    torch.cuda.empty_cache()
    free_after = torch.cuda.mem_get_info()[0]
    after = gbt.memory_reserved()
    print(f"reserved {held / MIB:.0f} MiB -> {after / MIB:.0f} MiB; device free memory grew "
          f"{(free_after - free_before) / MIB:.0f} MiB")
    expect(held >= 4 * GIB, "the 4 GiB were not cached")
    expect(after == 0, f"{after} B still reserved after empty_cache")
    expect(free_after - free_before >= held - 2 * MIB, "the device did not get the memory back")


def case_memory_fraction(args):
    import torch
    gbt = install(args)
    total = torch.cuda.mem_get_info()[1]
    torch.cuda.set_per_process_memory_fraction(0.05)
    allowed = int(0.05 * total)
    a = torch.empty(int(0.03 * total), dtype=torch.uint8, device="cuda")
    a.fill_(1)
    try:
        torch.empty(int(0.03 * total), dtype=torch.uint8, device="cuda")
        raise AssertionError("allocated past the memory fraction")
    except torch.OutOfMemoryError as e:
        msg = str(e).splitlines()[0]
        print(f"past the fraction: torch.OutOfMemoryError: {msg[:300]}")
        expect("allowed" in msg, "the message does not give the limit")
    del a
    b = torch.empty(int(0.03 * total), dtype=torch.uint8, device="cuda")
    b.fill_(2)
    expect(b[-1].item() == 2, "after the OOM")
    expect(gbt.max_memory_reserved() <= allowed, "reserved passed the fraction")
    print(f"fraction 0.05 of {total / GIB:.1f} GiB: {allowed / MIB:.0f} MiB allowed, peak reserved "
          f"{gbt.max_memory_reserved() / MIB:.0f} MiB")


def case_two_devices(args):
    import torch
    if torch.cuda.device_count() < 2:
        raise Skip(f"{torch.cuda.device_count()} GPU visible: the two-device case needs two")
    gbt = install(args)
    c = random_cpu(1 << 20, 7)
    xs = [c.to(f"cuda:{d}") for d in range(2)]
    y = xs[0].to("cuda:1")
    expect(torch.equal(y.cpu(), c) and torch.equal(xs[1].cpu(), c), "copies between devices")
    for d in range(2):
        expect(gbt.memory_allocated(d) > 0, f"device {d} counted nothing")
    print("two devices: tensors on each, copied between them, counted per device")


def case_graph_capture(args):
    """Capture is refused with a clear error before anything is captured; the process goes on."""
    import torch
    install(args)
    c = random_cpu(1 << 16, 8)
    x = c.cuda()
    g = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(g):
            y = x * 2
        y_cpu = y.cpu()
        raise AssertionError(f"capture went ahead (y == 2x: {torch.equal(y_cpu, c * 2)})")
    except RuntimeError as e:
        msg = str(e).splitlines()[0]
        print(f"capture: {type(e).__name__}: {msg}")
        expect("CUDA graph capture is not supported" in msg, "not our message")
    expect(not torch.cuda.is_current_stream_capturing(), "a capture was left open")
    z = x * 3
    expect(torch.equal(z.cpu(), c * 3), "work after the refused capture")
    print("after it: eager work runs and is right")


def case_mem_pool(args):
    """gbt.mem_pool() as a torch.cuda.MemPool: tensors made inside `use_mem_pool` take their
    segments from gpu-basics' allocator, those made outside do not, data is intact, and an
    out-of-memory inside the pool is PyTorch's torch.OutOfMemoryError."""
    import torch
    import gpu_basics.torch as gbt
    if not hasattr(torch.cuda, "use_mem_pool"):
        raise Skip(f"torch {torch.__version__} has no torch.cuda.use_mem_pool")
    pool = gbt.mem_pool(library=args.lib)
    outside_cpu = random_cpu(8 * MIB // 4, 10)
    outside = outside_cpu.cuda()
    expect(gbt.memory_reserved() == 0, "a tensor made outside the pool took memory from ours")
    cpus = [random_cpu(n, 11 + i) for i, n in enumerate((1 << 10, 3 * MIB // 4, 70 * MIB // 4))]
    with torch.cuda.use_mem_pool(pool):
        inside = [c.cuda() for c in cpus]
        try:
            torch.empty(400 * GIB, dtype=torch.uint8, device="cuda")
            raise AssertionError("a 400 GiB tensor was allocated in the pool")
        except torch.OutOfMemoryError as e:
            print(f"in the pool: torch.OutOfMemoryError: {str(e).splitlines()[0][:160]}")
    held = gbt.memory_reserved()
    want = sum(c.numel() * 4 for c in cpus)
    expect(held >= want, f"ours holds {held} B for {want} B of tensors made in the pool")
    after = torch.empty(4 * MIB, dtype=torch.uint8, device="cuda")
    expect(gbt.memory_reserved() == held, "a tensor made after the pool took memory from ours")
    for c, t in zip(cpus, inside):
        expect(torch.equal(t.cpu(), c), "a tensor in the pool: data differs")
    expect(torch.equal(outside.cpu(), outside_cpu), "a tensor outside the pool: data differs")
    print(f"pool: {len(inside)} tensors ({want / MIB:.1f} MiB) in {held / MIB:.0f} MiB from "
          f"gpu-basics' allocator ({gbt.memory_stats()['segment.all.current']} segments); "
          f"outside it nothing; data intact")
    del inside, after, t
    pool_id = pool.id
    del pool
    gc.collect()
    torch.cuda.empty_cache()
    kept, reserved = gbt.memory_allocated(), gbt.memory_reserved()
    print(f"after the pool {pool_id} is gone and torch.cuda.empty_cache(): PyTorch holds "
          f"{kept / MIB:.0f} MiB of ours, ours reserves {reserved / MIB:.0f} MiB")
    expect(kept == 0, "PyTorch kept segments of a pool that is gone")
    gbt.empty_cache()
    expect(gbt.memory_reserved() == 0, "gbt.empty_cache() left memory reserved")
    print("after gbt.empty_cache(): ours reserves 0 MiB")


def case_deterministic_1000(args):
    """1000 training steps under torch.use_deterministic_algorithms: every loss equal to the run
    with PyTorch's allocator."""
    script = os.path.join(REPO, "examples", "torch_pluggable.py")
    out = {}
    for name, extra in (("native", []), ("ours", ["--lib", args.lib])):
        path = os.path.join(args.work, f"det1000_{name}.json")
        cmd = [sys.executable, script, "--allocator", name, "--deterministic", "--steps", "1000",
               "--layers", "2", "--d-model", "256", "--heads", "4", "--batch", "4",
               "--max-seq", "256", "--json", path] + extra
        env = {k: v for k, v in os.environ.items()
               if k not in ("PYTORCH_CUDA_ALLOC_CONF", "GPU_BASICS_ALLOC_CONF")}
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
        print(f"{name}: {p.stdout.strip().splitlines()[-1] if p.stdout.strip() else p.stderr[-500:]}")
        expect(p.returncode == 0, f"{name} run failed: {p.stderr[-800:]}")
        with open(path) as f:
            out[name] = json.load(f)
    a, b = out["native"]["losses"], out["ours"]["losses"]
    expect(len(a) == len(b) == 1000, "steps")
    diff = [i for i in range(1000) if a[i] != b[i]]
    expect(not diff, f"losses differ at {len(diff)} steps, first {diff[:1]}")
    print(f"1000 steps: every loss identical (last {b[-1]!r})")


def case_package(args):
    """The package's functions against PyTorch's own numbers for the same workload (a child
    process runs it with PyTorch's allocator)."""
    import torch
    gbt = install(args)
    path = os.path.join(args.work, "package_snapshot.pickle")
    live = {}

    def while_live():  # the summary and snapshot while the workload's tensors are alive
        live["summary"] = gbt.memory_summary()
        gbt.dump_snapshot(path)

    ours = workload(torch, gbt, while_live)
    env = {k: v for k, v in os.environ.items() if k != "PYTORCH_CUDA_ALLOC_CONF"}
    p = subprocess.run([sys.executable, __file__, "native-workload"], env=env,
                       capture_output=True, text=True, timeout=300)
    expect(p.returncode == 0, f"native workload failed: {p.stderr[-800:]}")
    native = json.loads(p.stdout.strip().splitlines()[-1])
    page = 20 * MIB
    print(f"{'figure':<34} {'ours':>14} {'PyTorch':>14}")
    for k in native:
        print(f"{k:<34} {ours[k]:>14} {native[k]:>14}")
    for k in ("allocated_bytes.all.current", "allocated_bytes.all.peak",
              "requested_bytes.all.peak", "allocation.all.allocated", "peak_after_reset",
              "history_allocs", "memory_allocated") + POOL_KEYS:
        expect(ours[k] == native[k], f"{k}: {ours[k]} vs PyTorch's {native[k]}")
    # history_alloc_bytes: PyTorch's trace gives the sizes asked, ours the blocks' sizes (a
    # remainder too small to split stays with a block).
    for k in ("reserved_bytes.all.peak", "max_memory_reserved", "reserved_after_empty_cache",
              "snapshot_segment_bytes", "history_alloc_bytes", "reserved_bytes.small_pool.peak",
              "reserved_bytes.large_pool.peak"):
        expect(abs(ours[k] - native[k]) <= page, f"{k}: {ours[k]} vs {native[k]}: over a page apart")
    summary = live["summary"]
    print(summary)
    expect("Allocated memory" in summary and "GPU reserved memory" in summary, "summary rows")
    import pickle
    with open(path, "rb") as f:
        snap = pickle.load(f)
    held = sum(s["total_size"] for s in snap["segments"])
    expect(held > 0 and snap["device_traces"][0], "the snapshot holds no segments or no trace")
    print(f"snapshot written while the workload was live: {path} ({len(snap['segments'])} "
          f"segments, {held / MIB:.0f} MiB, {len(snap['device_traces'][0])} trace events)")


# Each pool's figures, counted apart by both allocators (PyTorch's small pool: requests up to
# 1 MiB, the large one the rest): equal where the .all. ones are.
POOL_KEYS = tuple(f"{stat}.{pool}.{k}" for pool in ("small_pool", "large_pool")
                  for stat, k in (("allocated_bytes", "current"), ("allocated_bytes", "peak"),
                                  ("requested_bytes", "peak"), ("allocation", "allocated")))


def workload(torch, api, while_live=None):
    """The same allocations under either allocator; `api` has PyTorch's memory functions;
    while_live() runs while the recorded tensors are alive."""
    gen = torch.Generator().manual_seed(9)
    sizes = [int(s) for s in torch.randint(1, 48 * MIB, (60,), generator=gen)]
    keep, out = [], {}
    api.reset_peak_memory_stats()
    for i, n in enumerate(sizes):
        t = torch.empty(n, dtype=torch.uint8, device="cuda")
        if i % 3:
            keep.append(t)
    del t
    keep = keep[::2]
    torch.cuda.synchronize()
    s = api.memory_stats()
    for k in ("allocated_bytes.all.current", "allocated_bytes.all.peak", "requested_bytes.all.peak",
              "reserved_bytes.all.peak", "allocation.all.allocated", "reserved_bytes.small_pool.peak",
              "reserved_bytes.large_pool.peak") + POOL_KEYS:
        out[k] = s[k]
    out["memory_allocated"] = api.memory_allocated()
    out["max_memory_reserved"] = api.max_memory_reserved()
    api.reset_peak_memory_stats()
    out["peak_after_reset"] = api.max_memory_allocated()
    record = getattr(api, "record_memory_history", None) or torch.cuda.memory._record_memory_history
    record("all", context=None, max_entries=100000)
    more = [torch.empty(n, dtype=torch.uint8, device="cuda") for n in sizes[:10]]
    snap = api.memory_snapshot() if api is not torch.cuda else torch.cuda.memory._snapshot()
    allocs = [e for e in snap["device_traces"][0] if e["action"] == "alloc"]
    out["history_allocs"] = len(allocs)
    out["history_alloc_bytes"] = sum(e["size"] for e in allocs)
    out["snapshot_segment_bytes"] = sum(s["total_size"] for s in snap["segments"])
    if while_live:
        while_live()
    del more, keep
    api.empty_cache()
    out["reserved_after_empty_cache"] = api.memory_reserved()
    return out


CASES = {
    "oom": case_oom, "zero_size": case_zero_size, "record_stream": case_record_stream,
    "threads": case_threads, "empty_cache": case_empty_cache,
    "memory_fraction": case_memory_fraction, "two_devices": case_two_devices,
    "graph_capture": case_graph_capture, "package": case_package, "mem_pool": case_mem_pool,
    "deterministic_1000": case_deterministic_1000,
}


def run_all(args) -> int:
    import torch
    if not torch.cuda.is_available():
        print("skipped: PyTorch sees no CUDA device")
        return 77
    os.makedirs(args.work, exist_ok=True)
    results = {}
    for name in args.case or list(CASES):
        t0 = time.monotonic()
        p = subprocess.run([sys.executable, __file__, "case", name, "--lib", args.lib,
                            "--work", args.work], capture_output=True, text=True, timeout=1200)
        verdict = {0: "PASSED", 77: "SKIPPED"}.get(p.returncode, "FAILED")
        text = (p.stdout + ("\n" + p.stderr if p.returncode not in (0, 77) else "")).strip()
        print(f"=== {name}: {verdict} ({time.monotonic() - t0:.1f} s)")
        print("    " + text[-3000:].replace("\n", "\n    "), flush=True)
        results[name] = {"verdict": verdict, "output": text}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    failed = [n for n, r in results.items() if r["verdict"] == "FAILED"]
    print(f"{len(results) - len(failed)} of {len(results)} cases passed or skipped"
          + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("mode", choices=["run", "case", "native-workload"])
    p.add_argument("name", nargs="?")
    p.add_argument("--lib", default="auto", help="allocator library: auto, c10, plain or a path")
    p.add_argument("--case", action="append", choices=list(CASES))
    p.add_argument("--json")
    p.add_argument("--work", default=os.path.join(os.getcwd(), "conformance_work"))
    args = p.parse_args()
    if args.mode == "run":
        return run_all(args)
    if args.mode == "native-workload":
        import torch
        print(json.dumps(workload(torch, torch.cuda)))
        return 0
    os.makedirs(args.work, exist_ok=True)
    try:
        CASES[args.name](args)
    except Skip as e:
        print(f"skipped: {e}")
        return 77
    except AssertionError as e:
        print(f"FAILED: {e}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
