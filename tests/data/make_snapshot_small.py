#!/usr/bin/env python3
"""Writes snapshot_small.pickle: a hand-made PyTorch memory snapshot (the dict
torch.cuda.memory._dump_snapshot pickles, protocol 4 as Python writes it) for
tests/unit/test_snapshot.cpp. Standard library only. Run it from anywhere:
    python3 tests/data/make_snapshot_small.py

What happens on device 0, stream 0 (MiB = 2**20):
  before recording: X, an 8 MiB block in a 20 MiB segment, and W, a 4 KiB block in a 2 MiB
                    small segment, are allocated (reserved 22 MiB)
  recorded:         segment_alloc S (2 MiB, small); alloc A1 1 MiB; alloc A2 1 MiB;
                    free X (never allocated in the trace); segment_alloc B (30 MiB);
                    alloc B 30 MiB; free A1
  at the end:       segments X (20 MiB, free), W (2 MiB, W allocated), S (2 MiB, A2
                    allocated), B (30 MiB, allocated): reserved 54 MiB
"""
import os
import pickle

MiB = 1 << 20
X, W, S, B = 0x7F5A00000000, 0x7F5A02000000, 0x7F5A02400000, 0x7F5A04000000


def block(addr, size, requested, state):
    return {"address": addr, "size": size, "requested_size": requested, "state": state,
            "frames": []}


def segment(addr, total, small, blocks):
    allocated = sum(b["size"] for b in blocks if b["state"] == "active_allocated")
    requested = sum(b["requested_size"] for b in blocks if b["state"] == "active_allocated")
    return {"device": 0, "address": addr, "total_size": total, "allocated_size": allocated,
            "active_size": allocated, "requested_size": requested, "stream": 0,
            "segment_type": "small" if small else "large", "segment_pool_id": (0, 0),
            "is_expandable": False, "frames": [], "blocks": blocks}


def event(action, addr, size, t):
    return {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": t,
            "frames": []}


segments = [
    segment(X, 20 * MiB, False, [block(X, 20 * MiB, 0, "inactive")]),
    segment(W, 2 * MiB, True, [block(W, 4096, 4096, "active_allocated"),
                                block(W + 4096, 2 * MiB - 4096, 0, "inactive")]),
    segment(S, 2 * MiB, True, [block(S, MiB, 0, "inactive"),
                                block(S + MiB, MiB, MiB, "active_allocated")]),
    segment(B, 30 * MiB, False, [block(B, 30 * MiB, 30 * MiB, "active_allocated")]),
]
trace = [
    event("segment_alloc", S, 2 * MiB, 1000),
    event("alloc", S, MiB, 1001),
    event("alloc", S + MiB, MiB, 1002),
    event("free_requested", X, 8 * MiB, 1003),
    event("free_completed", X, 8 * MiB, 1003),
    event("segment_alloc", B, 30 * MiB, 1004),
    event("alloc", B, 30 * MiB, 1005),
    event("free_requested", S, MiB, 1006),
    event("free_completed", S, MiB, 1006),
]
snapshot = {
    "segments": segments,
    "device_traces": [trace],
    "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1,
                           "garbage_collection_threshold": 0.0, "expandable_segments": False},
    "external_annotations": [],
}
out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "snapshot_small.pickle")
with open(out, "wb") as f:
    pickle.dump(snapshot, f, protocol=4)
