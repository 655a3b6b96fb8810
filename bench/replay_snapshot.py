#!/usr/bin/env python3
"""`gpu-basics replay` of a large PyTorch memory snapshot: wall time and peak RSS beside the
bounds it is held to (10 s and 2 GB for 10 million trace events, on 2 cores).

    bench/replay_snapshot.py [--events 10000000] [--runs 1] [--binary build/host-only/gpu-basics]
    bench/replay_snapshot.py --write snapshot.pickle [--events N]     # only write a snapshot

The snapshot is written into a temporary directory (deleted afterwards) as CPython's pickle
writes the dict torch.cuda.memory._snapshot() returns: protocol 4, 64 KiB frames, every dict,
list and str memoised, one that appears again fetched with BINGET / LONG_BINGET, lists in
APPENDS batches of 1000. It is streamed opcode by opcode, so 10 million events take no more
memory than the live blocks' bookkeeping.

The workload is a training loop recorded with stacks (_record_memory_history(stacks="all")):
per step a forward pass keeps activations and frees temporaries, a backward pass frees them in
reverse, gradient buckets are reduced on a second stream (their frees complete some events
later) and an optimizer step runs; the sequence length varies per step. Every alloc and every
free_requested has its own frames list (a new list of shared frame dicts, as PyTorch's
symbolizer makes them), a free_completed reuses its alloc's list. Segments are reserved before
recording and while it runs, and now and then a cached one is released and another reserved.

gpu-basics runs as a child process (the snapshot just written, so in the page cache): its wall
time (the median of --runs) and peak RSS (getrusage of the children) are printed beside the
bounds, with its CPU time, which a loaded machine does not stretch. Exit status: 1 when a bound
is exceeded, 2 when the replay fails. Standard library only.
"""
import argparse
import os
import random
import resource
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
MIB = 1 << 20
WALL_BOUND_S = 10.0
RSS_BOUND_BYTES = 2 * 10**9
FRAME_TARGET = 64 * 1024  # CPython's protocol-4 frame size
BATCH = 1000  # items per APPENDS / SETITEMS, as CPython


class PickleStream:
    """Protocol-4 opcodes as CPython's pickler writes them, committed in frames of ~64 KiB."""

    def __init__(self, f):
        self.f = f
        self.buf = bytearray()
        self.memo = 0  # len(memo): the index the next MEMOIZE takes
        self.shared = {}  # a str that is one object wherever it appears -> its memo index
        f.write(b"\x80\x04")

    def commit(self, force=False):
        if self.buf and (force or len(self.buf) >= FRAME_TARGET):
            self.f.write(b"\x95" + struct.pack("<Q", len(self.buf)))
            self.f.write(self.buf)
            self.buf = bytearray()

    def op(self, b):
        self.buf += b

    def memoize(self):
        self.buf += b"\x94"
        self.memo += 1
        return self.memo - 1

    @staticmethod
    def get_bytes(i):
        return b"h" + bytes((i,)) if i < 256 else b"j" + struct.pack("<I", i)

    def get(self, i):
        self.buf += self.get_bytes(i)

    @staticmethod
    def int_bytes(x):
        if 0 <= x < 256:
            return b"K" + bytes((x,))
        if 0 <= x < 65536:
            return b"M" + struct.pack("<H", x)
        if -(1 << 31) <= x < (1 << 31):
            return b"J" + struct.pack("<i", x)
        n = (x.bit_length() + 8) // 8  # LONG1, the fewest two's-complement bytes (encode_long)
        return b"\x8a" + bytes((n,)) + x.to_bytes(n, "little", signed=True)

    def int_(self, x):
        self.buf += self.int_bytes(x)

    def new_str(self, s):
        """A str object written for the first time (and memoised): its memo index."""
        b = s.encode()
        self.buf += (b"\x8c" + bytes((len(b),)) if len(b) < 256 else
                     b"X" + struct.pack("<I", len(b))) + b
        return self.memoize()

    def str_(self, s):
        """A str that is one object everywhere (dict keys, action names): fetched after its first
        use."""
        i = self.shared.get(s)
        if i is None:
            self.shared[s] = self.new_str(s)
        else:
            self.get(i)

    def dict_(self, items):
        """A dict of (key, write the value) pairs, at most one batch."""
        self.buf += b"}"
        self.memoize()
        if len(items) > 1:
            self.buf += b"("
        for k, w in items:
            self.str_(k)
            w()
        if items:
            self.buf += b"u" if len(items) > 1 else b"s"

    def list_(self, writers):
        """A list of values, each written by a function: in batches, as CPython."""
        self.buf += b"]"
        self.memoize()
        for i in range(0, len(writers), BATCH):
            batch = writers[i:i + BATCH]
            if len(batch) > 1:
                self.buf += b"("
            for w in batch:
                w()
            self.buf += b"e" if len(batch) > 1 else b"a"


class Workload:
    """A training loop's allocator trace (see the module's doc), written as a snapshot."""

    COMM_STREAM = 94381862190864  # a cudaStream_t as PyTorch records it
    LAYERS = 24
    HIDDEN = 4096
    ALIGN = 2 * MIB

    def __init__(self, events, seed=1):
        self.target = events
        self.rng = random.Random(seed)
        self.events = 0
        self.in_batch = 0  # trace entries in the open APPENDS batch
        self.fast = {}  # action -> an entry's fixed bytes, once its keys are memoised
        self.int_cache = {}  # int -> its opcode bytes (addresses and sizes repeat every step)
        self.time_us = 1796295637858831
        self.frames = []  # (name, filename, line)
        self.frame_memo = {}  # frame index -> memo index of its dict, once written
        self.sites = {}  # call site -> its stack (frame indices)
        self.site_body = {}  # call site -> its frames list's items, once they are all GETs
        self.live = {}  # address -> (size, stream, memo index of its frames list)
        self.pending = []  # [events to wait, address, size, stream, frames memo]
        self.segments = {}  # address -> [size, stream, {block address: (size, state)}]
        self.fixed = set()  # segments that hold weights or slots: never released
        self.slot_addr = {}
        self.next_addr = 0x7F2000000000

    def ints(self, x):
        b = self.int_cache.get(x)
        if b is None:
            b = self.int_cache[x] = PickleStream.int_bytes(x)
        return b

    # -- stacks ---------------------------------------------------------------------------------
    def frame(self, name, filename, line):
        self.frames.append((name, filename, line))
        return len(self.frames) - 1

    def stack(self, site):
        s = self.sites.get(site)
        if s is None:
            r = self.rng
            py = [self.frame("<module>", "train.py", 212), self.frame("main", "train.py", 198),
                  self.frame("train_epoch", "train.py", 151)]
            py += [self.frame(f"{site}_{k}", f"/opt/venv/lib/python3.11/site-packages/model/{site}.py",
                              r.randrange(20, 900)) for k in range(r.randrange(6, 24))]
            cpp = [self.frame(f"at::native::{site}_kernel_{k}", "aten/src/ATen/native/Ops.cpp",
                              r.randrange(100, 5000)) for k in range(r.randrange(4, 16))]
            s = self.sites[site] = cpp[::-1] + py[::-1]  # innermost first, as PyTorch
        return s

    def frame_dict(self, p, fi):
        m = self.frame_memo.get(fi)
        if m is not None:
            p.get(m)
            return
        name, filename, line = self.frames[fi]
        p.op(b"}")
        self.frame_memo[fi] = p.memoize()
        p.op(b"(")
        p.str_("name")
        p.new_str(name)
        p.str_("filename")
        p.new_str(filename)
        p.str_("line")
        p.int_(line)
        p.op(b"u")

    def frames_list(self, p, site):
        """A new frames list: its memo index."""
        p.op(b"]")
        memo = p.memoize()
        body = self.site_body.get(site)
        if body is not None:  # every frame dict written already: the same GETs as before
            p.op(body)
            return memo
        start = len(p.buf)
        p.op(b"(")
        fresh = False
        for fi in self.stack(site):
            fresh |= fi not in self.frame_memo
            self.frame_dict(p, fi)
        p.op(b"e")
        if not fresh:
            self.site_body[site] = bytes(p.buf[start:])
        return memo

    # -- trace entries --------------------------------------------------------------------------
    def entry(self, p, action, addr, size, stream, site=None, frames_memo=None):
        if self.in_batch == 0:
            p.op(b"(")
        self.time_us += 1 + self.rng.getrandbits(5)
        fast = self.fast.get(action)
        if fast is None:  # keys or action not memoised yet: written one by one
            self.slow_entry(p, action, addr, size, stream)
            if all(k in p.shared for k in self.KEYS + (action,)):
                g = {k: p.get_bytes(p.shared[k]) for k in self.KEYS + (action,)}
                self.fast[action] = (b"}\x94(" + g["action"] + g[action] + g["addr"], g["size"],
                                     g["stream"], g["time_us"],
                                     g["compile_context"] + b"\x8c\x03N/A\x94" + g["user_metadata"] +
                                     g[""] + g["frames"])
        else:
            head, k_size, k_stream, k_time, tail = fast
            enc = self.ints
            p.op(b"".join((head, enc(addr), k_size, enc(size), k_stream, enc(stream), k_time,
                           b"\x8a\x07", self.time_us.to_bytes(7, "little"), tail)))
            p.memo += 2  # the dict and its "N/A"
        if frames_memo is None:
            frames_memo = self.frames_list(p, site)
        else:
            p.get(frames_memo)
        p.op(b"u")
        self.events += 1
        self.in_batch += 1
        if self.in_batch == BATCH:
            p.op(b"e")
            self.in_batch = 0
        p.commit()
        return frames_memo

    KEYS = ("action", "addr", "size", "stream", "time_us", "compile_context", "user_metadata", "",
            "frames")

    def slow_entry(self, p, action, addr, size, stream):
        p.op(b"}")
        p.memoize()
        p.op(b"(")
        p.str_("action")
        p.str_(action)
        p.str_("addr")
        p.int_(addr)
        p.str_("size")
        p.int_(size)
        p.str_("stream")
        p.int_(stream)
        p.str_("time_us")
        p.int_(self.time_us)
        p.str_("compile_context")
        p.new_str("N/A")  # a new str object per entry, as PyTorch makes them
        p.str_("user_metadata")
        p.str_("")
        p.str_("frames")

    def reserve(self, size, stream, p=None, site=None, fixed=True):
        """A segment of at least `size` bytes (a segment_alloc once recording runs)."""
        size = -(-size // self.ALIGN) * self.ALIGN
        addr = self.next_addr
        self.next_addr += size + self.ALIGN
        self.segments[addr] = [size, stream, {}]
        if fixed:
            self.fixed.add(addr)
        if p is not None:
            self.entry(p, "segment_alloc", addr, size, stream, site=site)
        return addr

    def alloc(self, p, slot, size, stream=0):
        """An alloc in `slot`'s segment (one per slot: the cache hands the same block back)."""
        addr = self.slot_addr.get(slot)
        if addr is None:
            addr = self.slot_addr[slot] = self.reserve(2 * size, stream, p, slot)
        memo = self.entry(p, "alloc", addr, size, stream, site=slot)
        self.live[addr] = (size, stream, memo)
        return addr

    def free(self, p, addr, site):
        size, stream, memo = self.live.pop(addr)
        self.entry(p, "free_requested", addr, size, stream, site=site)
        if stream == 0:
            self.entry(p, "free_completed", addr, size, stream, frames_memo=memo)
        else:  # used on another stream: completes once its events have
            self.pending.append([self.rng.randrange(3, 30), addr, size, stream, memo])

    def complete_pending(self, p):
        for item in self.pending:
            item[0] -= 1
            if item[0] <= 0:
                _, addr, size, stream, memo = item
                self.entry(p, "free_completed", addr, size, stream, frames_memo=memo)
        self.pending = [i for i in self.pending if i[0] > 0]

    def churn_segment(self, p):
        """A cached segment released (empty_cache under pressure) and another reserved."""
        cached = [a for a in self.segments if a not in self.fixed]
        if cached:
            a = self.rng.choice(cached)
            size, stream, _ = self.segments.pop(a)
            self.entry(p, "segment_free", a, size, stream, site="empty_cache")
        self.reserve(self.rng.choice((20, 64, 128)) * MIB, 0, p, "cache_grow", fixed=False)

    def step(self, p, step):
        tokens = 8 * self.rng.choice((512, 1024, 1536, 2048))
        act = tokens * self.HIDDEN * 2
        saved = []
        for layer in range(self.LAYERS):
            t1 = self.alloc(p, f"qkv{layer}", act * 3)
            saved.append(self.alloc(p, f"attn_out{layer}", act))
            saved.append(self.alloc(p, f"mlp_up{layer}", act * 4))
            saved.append(self.alloc(p, f"norm{layer}", tokens * 4))
            self.free(p, t1, "attention")
            t2 = self.alloc(p, f"mlp_act{layer}", act)
            saved.append(self.alloc(p, f"mlp_out{layer}", act))
            self.free(p, t2, "mlp")
            self.complete_pending(p)
        for layer in reversed(range(self.LAYERS)):
            g = self.alloc(p, f"grad{layer}", act)
            for _ in range(4):
                self.free(p, saved.pop(), "backward")
            self.free(p, g, "backward")
            if layer % 6 == 0:  # a gradient bucket, reduced on the communication stream
                b = self.alloc(p, f"bucket{layer}", 25 * MIB, self.COMM_STREAM)
                self.free(p, b, "all_reduce")
            self.complete_pending(p)
        for k in range(8):  # optimizer step: a temporary per parameter group
            m = self.alloc(p, f"adam{k}", self.HIDDEN * self.HIDDEN * 2)
            self.free(p, m, "optimizer")
        self.complete_pending(p)
        if step % 50 == 49:
            self.churn_segment(p)

    # -- the snapshot ---------------------------------------------------------------------------
    def write(self, f):
        """Writes the snapshot; returns the number of steps."""
        p = PickleStream(f)
        weights = [self.reserve(4 * self.HIDDEN * self.HIDDEN * 2, 0) for _ in range(self.LAYERS)]
        for _ in range(8):  # cached before recording began
            self.reserve(20 * MIB, 0, fixed=False)
        p.op(b"}")
        p.memoize()
        p.op(b"(")
        p.str_("device_traces")  # the trace first: the segments are known once it ends
        p.op(b"]")
        p.memoize()
        p.op(b"]")  # device 0's trace, appended to device_traces once it ends
        p.memoize()
        steps = 0
        while self.events < self.target:
            self.step(p, steps)
            steps += 1
        if self.in_batch:
            p.op(b"e")
        p.op(b"a")  # device_traces: [trace]
        for a in weights:
            self.segments[a][2][a] = (self.segments[a][0], "active_allocated")
        for a, (size, stream, _) in self.live.items():
            self.segments[a][2][a] = (size, "active_allocated")
        p.str_("segments")
        p.list_([lambda a=a: self.segment(p, a) for a in sorted(self.segments)])
        p.str_("allocator_settings")
        p.dict_([("PYTORCH_CUDA_ALLOC_CONF", lambda: p.new_str("")),
                 ("max_split_size", lambda: p.int_(-1)),
                 ("garbage_collection_threshold", lambda: p.op(b"G" + struct.pack(">d", 0.0))),
                 ("expandable_segments", lambda: p.op(b"\x89"))])
        p.str_("external_annotations")
        p.list_([])
        p.op(b"u")  # the root's SETITEMS
        p.op(b".")
        p.commit(force=True)
        return steps

    def segment(self, p, addr):
        size, stream, blocks = self.segments[addr]
        rows, at = [], addr
        for b in sorted(blocks):
            if b > at:
                rows.append((at, b - at, 0, "inactive"))
            rows.append((b, blocks[b][0], blocks[b][0], blocks[b][1]))
            at = b + blocks[b][0]
        if at < addr + size:
            rows.append((at, addr + size - at, 0, "inactive"))
        allocated = sum(r[1] for r in rows if r[3] == "active_allocated")

        def block(r):
            p.dict_([("address", lambda: p.int_(r[0])), ("size", lambda: p.int_(r[1])),
                     ("requested_size", lambda: p.int_(r[2])), ("state", lambda: p.str_(r[3])),
                     ("frames", lambda: p.list_([]))])

        p.dict_([("device", lambda: p.int_(0)), ("address", lambda: p.int_(addr)),
                 ("total_size", lambda: p.int_(size)), ("allocated_size", lambda: p.int_(allocated)),
                 ("active_size", lambda: p.int_(allocated)),
                 ("requested_size", lambda: p.int_(allocated)), ("stream", lambda: p.int_(stream)),
                 ("segment_type", lambda: p.str_("large")),
                 ("segment_pool_id", lambda: p.op(b"K\x00K\x00\x86") or p.memoize()),
                 ("is_expandable", lambda: p.op(b"\x89")), ("frames", lambda: p.list_([])),
                 ("blocks", lambda: p.list_([lambda r=r: block(r) for r in rows]))])


def write_snapshot(path, events, seed=1):
    """Writes a snapshot of about `events` trace entries (whole steps): (entries, steps)."""
    w = Workload(events, seed)
    with open(path, "wb") as f:
        steps = w.write(f)
    return w.events, steps


def measure(binary, snapshot):
    """Runs `gpu-basics replay` on `snapshot`: (exit status, wall s, CPU s, stderr)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    p = subprocess.run([binary, "replay", snapshot, "--json", os.devnull],
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return p.returncode, wall, cpu, p.stderr


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=10_000_000, help="trace entries (default 10M)")
    ap.add_argument("--binary", default=os.path.join(REPO, "build", "host-only", "gpu-basics"))
    ap.add_argument("--runs", type=int, default=1, help="replays of the one snapshot (default 1)")
    ap.add_argument("--write", metavar="PATH", help="only write the snapshot to PATH")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    if a.write:
        t0 = time.monotonic()
        events, steps = write_snapshot(a.write, a.events, a.seed)
        print(f"{a.write}: {events} trace events ({steps} steps), "
              f"{os.path.getsize(a.write) / 1e6:.0f} MB in {time.monotonic() - t0:.0f} s")
        return 0
    if not os.access(a.binary, os.X_OK):
        print(f"replay_snapshot: {a.binary} not found: build it first "
              "(cmake --preset host-only && cmake --build --preset host-only)", file=sys.stderr)
        return 2
    tmp = tempfile.mkdtemp(prefix="gpu_basics_replay_bench_")
    walls = []
    try:
        path = os.path.join(tmp, "snapshot.pickle")
        t0 = time.monotonic()
        events, steps = write_snapshot(path, a.events, a.seed)
        print(f"snapshot: {events} trace events ({steps} training steps), "
              f"{os.path.getsize(path) / 1e6:.0f} MB, written in {time.monotonic() - t0:.0f} s",
              flush=True)
        for run in range(a.runs):
            rc, wall, cpu, err = measure(a.binary, path)
            if rc != 0:
                print(f"replay failed (exit {rc}): {err.strip()}", file=sys.stderr)
                return 2
            print(f"run {run + 1}: {wall:.2f} s wall, {cpu:.2f} s CPU (user + sys)", flush=True)
            walls.append(wall)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    wall = statistics.median(walls)
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024  # KiB on Linux
    ok_wall, ok_rss = wall <= WALL_BOUND_S, rss <= RSS_BOUND_BYTES
    print(f"replay wall time: {wall:6.2f} s   bound {WALL_BOUND_S:5.1f} s   "
          f"{'ok' if ok_wall else 'OVER'}" + (" (median)" if a.runs > 1 else ""))
    print(f"replay peak RSS:  {rss / 1e9:6.2f} GB  bound {RSS_BOUND_BYTES / 1e9:5.1f} GB  "
          f"{'ok' if ok_rss else 'OVER'}")
    if abs(events - 10_000_000) > 10_000:
        print("(the bounds are those of 10 million events)")
    return 0 if ok_wall and ok_rss else 1


if __name__ == "__main__":
    sys.exit(main())
