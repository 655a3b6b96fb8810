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


def test_only_a_segment_in_a_released_range_counts_as_a_reused_address():
    trace = [ev("segment_alloc", 4 * MIB, 0x10000000), ev("segment_alloc", 4 * MIB, 0x20000000),
             # below the highest, but nothing was released there: placed, not reused
             ev("segment_alloc", 2 * MIB, 0x08000000),
             ev("segment_free", 4 * MIB, 0x10000000),
             # inside the released range, at its start and further in
             ev("segment_alloc", 2 * MIB, 0x10000000), ev("segment_alloc", 2 * MIB, 0x10200000),
             # just past its end: not reused
             ev("segment_alloc", 2 * MIB, 0x10400000),
             # expandable segments: an unmapped range mapped again
             ev("segment_map", 2 * MIB, 0x40000000), ev("segment_unmap", 2 * MIB, 0x40000000),
             ev("segment_map", 2 * MIB, 0x40000000), ev("segment_map", 2 * MIB, 0x3FE00000)]
    t = av.trace_summary(trace)
    assert t["reused_addresses"] == 3
    assert t["oom"] is False


def test_placement_says_whether_each_segment_went_above_or_below_the_one_before():
    up_down = [ev("segment_alloc", 2 * MIB, 0x40000000), ev("alloc", 1 * MIB),
               ev("segment_alloc", 20 * MIB, 0x20000000), ev("segment_free", 2 * MIB, 0x40000000),
               ev("segment_alloc", 20 * MIB, 0x60000000), ev("segment_map", 2 * MIB, 0x80000000),
               ev("segment_free", 20 * MIB, 0x60000000), ev("segment_alloc", 20 * MIB, 0x60000000),
               ev("segment_alloc", 20 * MIB, 0x70000000),
               ev("oom", 64 * MIB), ev("segment_alloc", 2 * MIB, 0x1000)]
    t = av.trace_summary(up_down)
    assert t["placement"] == "-+=+"  # mappings and what follows the OOM left out
    assert av.trace_summary([ev("segment_alloc", 2 * MIB, 0x1000)])["placement"] == ""
    assert (av.describe_placement("-++", "-++", "a", "b")
            == "placements: the same (2 of 3 above the one before)")
    assert (av.describe_placement("-++", "--+", "rerun 0", "rerun 1")
            == "placements: part at segment #2 (rerun 0: 2 of 3 above the one before; "
               "rerun 1: 1 of 3 above the one before)")


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
    assert got == ("segments: part at #1 (rerun 0: alloc 67108864 B; "
                   "rerun 1: segment_free 125829120 B)")
    assert (av.describe_difference("r", a[:1], a, "x", "y")
            == "r: part at #1 (x: the end; y: alloc 67108864 B)")
    # small requests that differ by a few bytes still read as different
    assert (av.describe_difference("r", [("alloc", 512)], [("alloc", 1024)], "x", "y")
            == "r: part at #0 (x: alloc 512 B; y: alloc 1024 B)")


def test_load_trace_reads_a_plain_snapshot_pickle(tmp_path):
    trace = [ev("segment_alloc", 2 * MIB, 0x1000), ev("alloc", 512)]
    path = tmp_path / "s.pickle"
    path.write_bytes(pickle.dumps({"segments": [], "device_traces": [trace]}))
    assert av.load_trace(str(path)) == trace
    assert av.load_trace(str(path), device=1) == []


def write(path, trace):
    with open(path, "wb") as f:
        pickle.dump({"device_traces": [trace]}, f)


class Args:
    def __init__(self, work):
        self.work = work


def test_rerun_reports_each_outcome_and_where_the_reruns_part(tmp_path, monkeypatch):
    recording = [ev("segment_alloc", 20 * MIB, 0x1000000), ev("alloc", 8 * MIB),
                 ev("segment_alloc", 120 * MIB, 0x9000000), ev("alloc", 120 * MIB)]
    write(tmp_path / "rec.pickle", recording)
    # rerun 0 runs; rerun 1 takes another segment and runs out of memory on the same request;
    # rerun 2 asks for something else first (the workload changed); rerun 3 ends early without
    # an out-of-memory error (also the workload).
    traces = [
        [ev("segment_alloc", 20 * MIB, 0x1000000), ev("alloc", 8 * MIB),
         ev("segment_alloc", 120 * MIB, 0x9000000), ev("alloc", 120 * MIB)],
        [ev("segment_alloc", 20 * MIB, 0x1000000), ev("alloc", 8 * MIB),
         ev("segment_alloc", 64 * MIB, 0x9000000), ev("oom", 120 * MIB)],
        [ev("segment_alloc", 20 * MIB, 0x1000000), ev("alloc", 4 * MIB)],
        [ev("segment_alloc", 20 * MIB, 0x1000000), ev("alloc", 8 * MIB)],
    ]
    calls = []

    def fake_child(args, workload, conf=None, limit=None, record=None):
        k = len(calls)
        calls.append((workload, conf, limit))
        write(record, traces[k])
        oom = any(e["action"] == "oom" for e in traces[k])
        return {"oom": oom, "max_reserved": (84 if oom else 140) * MIB}

    monkeypatch.setattr(av, "run_child", fake_child)
    monkeypatch.setattr(av, "RERUNS", 4)
    got = av.rerun(Args(str(tmp_path)), "transformer", "max_split_size_mb:64", 1000 * MIB,
                   str(tmp_path / "rec.pickle"), "tag", lambda r: not r["oom"])
    assert calls == [("transformer", "max_split_size_mb:64", 1000 * MIB)] * 4
    assert got["outcomes"] == ["runs", "OOM", "runs", "runs"]
    assert got["agreed"] == 3
    assert got["max_reserved"] == [140 * MIB, 84 * MIB, 140 * MIB, 140 * MIB]
    assert got["snapshots"] == [os.path.join(str(tmp_path), f"transformer.tag.rerun{k}.pickle")
                                for k in range(4)]
    notes = got["notes"]
    assert len(notes) == 7
    assert notes[0] == ("rerun 0: runs, max reserved 140.0 MiB, agrees with the prediction, "
                        "0 segment(s) at reused addresses; requests: the same 2; "
                        "placements: the same (1 of 1 above the one before)")
    # to its out-of-memory error, rerun 1 asked for what the recording did
    assert notes[1] == ("rerun 1: OOM, max reserved 84.0 MiB, disagrees with the prediction, "
                        "0 segment(s) at reused addresses; requests: the same 1; "
                        "placements: the same (1 of 1 above the one before)")
    assert notes[2].endswith(
        "requests: part at #0 (recording: alloc 8388608 B; rerun 2: alloc 4194304 B); "
        "placements: part at segment #1 (recording: 1 of 1 above the one before; "
        "rerun 2: 0 of 0 above the one before)")
    # ending early without an out-of-memory error is a difference, not a match
    assert notes[3].startswith("rerun 3: runs")
    assert "requests: part at #1 (recording: alloc 125829120 B; rerun 3: the end)" in notes[3]
    assert notes[4] == ("segments, rerun 0 vs 1: part at #1 (rerun 0: segment_alloc 125829120 B; "
                        "rerun 1: segment_alloc 67108864 B); "
                        "placements: the same (1 of 1 above the one before)")
    assert notes[5] == ("segments, rerun 0 vs 2: part at #1 (rerun 0: segment_alloc 125829120 B; "
                        "rerun 2: the end); placements: part at segment #1 (rerun 0: 1 of 1 above "
                        "the one before; rerun 2: 0 of 0 above the one before)")
    assert notes[6].startswith("segments, rerun 0 vs 3: part at #1")


def test_a_rerun_that_fails_or_comes_after_the_deadline_is_reported_not_raised(tmp_path,
                                                                               monkeypatch):
    write(tmp_path / "rec.pickle", [ev("alloc", 8 * MIB)])
    calls = []

    def failing_child(args, workload, conf=None, limit=None, record=None):
        calls.append(record)
        if len(calls) == 1:
            raise RuntimeError("transformer child failed (-9): killed")
        write(record, [ev("alloc", 8 * MIB)])
        return {"oom": False, "max_reserved": 10 * MIB}

    monkeypatch.setattr(av, "run_child", failing_child)
    got = av.rerun(Args(str(tmp_path)), "transformer", "", None, str(tmp_path / "rec.pickle"),
                   "t", lambda r: True)
    assert got["outcomes"] == ["failed", "runs", "runs"]
    assert got["agreed"] == 2
    assert got["notes"][0] == "rerun 0: failed: transformer child failed (-9): killed"
    assert got["snapshots"] == [os.path.join(str(tmp_path), f"transformer.t.rerun{k}.pickle")
                                for k in (1, 2)]
    assert got["notes"][-1] == ("segments, rerun 1 vs 2: the same 0; "
                                "placements: the same (0 of 0 above the one before)")

    calls.clear()
    past = av.rerun(Args(str(tmp_path)), "transformer", "", None, str(tmp_path / "rec.pickle"),
                    "t", lambda r: True, deadline=av.time.monotonic() - 1)
    assert calls == []
    assert past["outcomes"] == []
    assert past["notes"] == ["rerun 0 and later: skipped, the reruns' time budget is spent"]
