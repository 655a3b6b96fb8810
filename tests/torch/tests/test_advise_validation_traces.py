"""The trace comparison that advise_validation.py reports when PyTorch disagrees with a
prediction: pure Python over snapshot-shaped dicts, so it runs without a GPU or PyTorch."""
import os
import pickle
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import advise_validation as av  # noqa: E402

MIB = 1 << 20


def ev(action, size, addr=0):
    return {"action": action, "size": size, "addr": addr, "stream": 0}


def test_requests_stop_at_the_first_oom_and_segments_keep_their_order():
    trace = [ev("segment_alloc", 20 * MIB, 0x1000), ev("alloc", 3 * MIB),
             ev("segment_alloc", 2 * MIB, 0x9000), ev("alloc", 1 * MIB),
             ev("free_requested", 3 * MIB), ev("free_completed", 3 * MIB), ev("oom", 120 * MIB),
             ev("free_requested", 1 * MIB), ev("segment_free", 2 * MIB, 0x9000)]
    t = av.trace_summary(trace)
    assert t["requests"] == [("alloc", 3 * MIB), ("alloc", 1 * MIB), ("free_requested", 3 * MIB)]
    assert t["segments"] == [("segment_alloc", 20 * MIB), ("segment_alloc", 2 * MIB),
                             ("segment_free", 2 * MIB)]
    assert t["oom"] is True
    assert t["reused_addresses"] == 0


def test_a_segment_below_an_earlier_one_counts_as_a_reused_address():
    trace = [ev("segment_alloc", 4 * MIB, 0x8000), ev("segment_alloc", 4 * MIB, 0x9000),
             ev("segment_free", 4 * MIB, 0x8000), ev("segment_alloc", 2 * MIB, 0x8000),
             ev("segment_alloc", 2 * MIB, 0xA000), ev("segment_alloc", 2 * MIB, 0x8400),
             # the highest freed and taken again at its own address: still above every other
             ev("segment_free", 2 * MIB, 0xA000), ev("segment_alloc", 2 * MIB, 0xA000)]
    t = av.trace_summary(trace)
    assert t["reused_addresses"] == 2
    assert t["oom"] is False


def test_first_difference_names_the_index_where_sequences_part_or_the_shorter_ends():
    assert av.first_difference([1, 2, 3], [1, 2, 3]) is None
    assert av.first_difference([1, 2, 3], [1, 5, 3]) == 1
    assert av.first_difference([1, 2], [1, 2, 3]) == 2
    assert av.first_difference([], [7]) == 0


def test_describe_difference_shows_both_sides_at_the_parting():
    a = [("alloc", 2 * MIB), ("alloc", 64 * MIB)]
    b = [("alloc", 2 * MIB), ("segment_free", 120 * MIB)]
    assert av.describe_difference("segments", a, a, "x", "y") == "segments: the same 2"
    got = av.describe_difference("segments", a, b, "rerun 0", "rerun 1")
    assert got == ("segments: part at #1 (rerun 0: alloc 64.00 MiB; "
                   "rerun 1: segment_free 120.00 MiB)")
    assert (av.describe_difference("r", a[:1], a, "x", "y")
            == "r: part at #1 (x: the end; y: alloc 64.00 MiB)")


def test_load_trace_reads_a_plain_snapshot_pickle(tmp_path):
    trace = [ev("segment_alloc", 2 * MIB, 0x1000), ev("alloc", 512)]
    path = tmp_path / "s.pickle"
    path.write_bytes(pickle.dumps({"segments": [], "device_traces": [trace]}))
    assert av.load_trace(str(path)) == trace
    assert av.load_trace(str(path), device=1) == []


def test_rerun_reports_each_outcome_and_where_the_reruns_part(tmp_path, monkeypatch):
    recording = [ev("segment_alloc", 20 * MIB, 0x1000), ev("alloc", 8 * MIB),
                 ev("alloc", 120 * MIB)]
    rec_path = tmp_path / "rec.pickle"
    rec_path.write_bytes(pickle.dumps({"device_traces": [recording]}))
    # rerun 0 runs; rerun 1 takes its second segment at a reused address and runs out of memory
    # on the same request; rerun 2 asks for something else first (the workload changed).
    traces = [
        [ev("segment_alloc", 20 * MIB, 0x1000), ev("alloc", 8 * MIB),
         ev("segment_alloc", 120 * MIB, 0x9000000), ev("alloc", 120 * MIB)],
        [ev("segment_alloc", 20 * MIB, 0x9000000), ev("alloc", 8 * MIB),
         ev("segment_alloc", 64 * MIB, 0x1000), ev("oom", 120 * MIB)],
        [ev("segment_alloc", 20 * MIB, 0x1000), ev("alloc", 4 * MIB)],
    ]
    calls = []

    def fake_child(args, workload, conf=None, limit=None, record=None):
        k = len(calls)
        calls.append((workload, conf, limit))
        with open(record, "wb") as f:
            pickle.dump({"device_traces": [traces[k]]}, f)
        oom = any(e["action"] == "oom" for e in traces[k])
        return {"oom": oom, "max_reserved": (84 if oom else 140) * MIB}

    monkeypatch.setattr(av, "run_child", fake_child)

    class Args:
        work = str(tmp_path)

    got = av.rerun(Args(), "transformer", "max_split_size_mb:64", 1000 * MIB, str(rec_path), "tag")
    assert calls == [("transformer", "max_split_size_mb:64", 1000 * MIB)] * 3
    assert got["outcomes"] == ["runs", "OOM", "runs"]
    assert got["max_reserved"] == [140 * MIB, 84 * MIB, 140 * MIB]
    assert got["snapshots"] == [os.path.join(str(tmp_path), f"transformer.tag.rerun{k}.pickle")
                                for k in range(3)]
    notes = got["notes"]
    assert notes[0].endswith("0 segment(s) at reused addresses; requests: the same 2")
    assert "1 segment(s) at reused addresses; requests: the same 1" in notes[1]
    assert notes[2] == ("segments, rerun 0 vs 1: part at #1 (rerun 0: segment_alloc 120.00 MiB; "
                        "rerun 1: segment_alloc 64.00 MiB)")
    assert notes[3].endswith(
        "requests: part at #0 (recording: alloc 8.00 MiB; rerun 2: alloc 4.00 MiB)")
    assert notes[4] == ("segments, rerun 0 vs 2: part at #1 (rerun 0: segment_alloc 120.00 MiB; "
                        "rerun 2: the end)")
    assert len(notes) == 5
