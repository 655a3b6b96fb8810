// The replay of a snapshot's allocations through the allocator: peaks against PyTorch's own,
// sizes past 64 bits, Ctrl-C, prepared and parallel replays.
#include <algorithm>
#include <csignal>
#include <optional>
#include <set>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/interrupt.hpp"
#include "gpu_basics/memory/caching_allocator.hpp"
#include "gpu_basics/memory/fake_backend.hpp"
#include "gpu_basics/snapshot/pickle.hpp"
#include "gpu_basics/snapshot/policy_sweep.hpp"
#include "gpu_basics/snapshot/replay.hpp"
#include "gpu_basics/snapshot/snapshot.hpp"

#include "snapshot_test_util.hpp"

using namespace snapshot_test;

TEST(Snapshot, HandMadeSnapshotReplaysToThePeakWorkedOutByHand) {
  const auto s = gb::read_torch_snapshot(kData + "/snapshot_small.pickle");
  ASSERT_EQ(s.device_traces.size(), 1u);
  EXPECT_EQ(s.segments.size(), 4u);
  EXPECT_EQ(s.device_traces[0].size(), 9u);
  EXPECT_EQ(s.alloc_conf, "");
  std::size_t rebuilt = 0;
  const auto trace = gb::to_replay_trace(s, 0, &rebuilt);
  // X (8 MiB, freed in the trace, never allocated there) and W (4 KiB, allocated at the end, no
  // event) are allocated first; then A1, A2, free X, B, free A1.
  EXPECT_EQ(rebuilt, 2u);
  ASSERT_EQ(trace.size(), 7u);
  EXPECT_EQ(trace[0].bytes, 8 * MiB);
  EXPECT_EQ(trace[1].bytes, 4096u);
  EXPECT_EQ(trace[4].kind, gb::replay_event::op::free);
  EXPECT_EQ(trace[4].id, trace[0].id);
  // Under the defaults, by hand: X 8 MiB (1-10 MiB) takes a 20 MiB segment (20); W 4 KiB takes
  // a 2 MiB small segment (22); A1 1 MiB fits the rest of it (22); A2 does not (2 MiB - 4 KiB -
  // 1 MiB left): a new 2 MiB small segment (24); freeing X leaves its 20 MiB cached, which a
  // 30 MiB request cannot use: a 30 MiB segment (54). Peak 54 MiB, four segments.
  const auto r = gb::replay_trace(trace, {});
  EXPECT_EQ(r.peak_reserved, 54 * MiB);
  EXPECT_EQ(r.backend_allocations, 4);
  EXPECT_EQ(r.peak_requested, 32 * MiB + 4096);  // X + W + A1 + A2 = 10 MiB + 4 KiB, then 32
  // PyTorch's own figures: 54 MiB at the end, +32 MiB of segments in the trace, so 22 MiB at the
  // start and a 54 MiB peak, from two segment_allocs.
  const auto rec = gb::recorded(s, 0);
  EXPECT_EQ(rec.reserved_at_end, 54 * MiB);
  EXPECT_EQ(rec.reserved_at_start, 22 * MiB);
  EXPECT_EQ(rec.peak_reserved, 54 * MiB);
  EXPECT_EQ(rec.backend_allocations, 2);
  EXPECT_EQ(rec.peak_requested, 32 * MiB + 4096);
  EXPECT_EQ(rec.events, 9u);
}

TEST(Snapshot, ARealH200SnapshotReplaysToPyTorchsOwnPeak) {
  // examples/record_snapshot.py on the H200 (PyTorch 2.11, default allocator settings): 12 steps
  // of a small transformer with a sequence length that changes every step, recorded after the
  // model existed. Our native-like replay follows PyTorch's placement: its peak reserved is
  // PyTorch's own, to the byte (a rebuilt start, blocks alive before recording packed afresh
  // rather than in PyTorch's segments, could move it; here it does not).
  const auto s = gb::read_torch_snapshot(kData + "/h200_torch_snapshot.pickle");
  std::size_t rebuilt = 0;
  const auto trace = gb::to_replay_trace(s, 0, &rebuilt);
  EXPECT_EQ(rebuilt, 30u);
  const auto rec = gb::recorded(s, 0);
  EXPECT_EQ(rec.peak_reserved, 248u * MiB);
  gb::allocator_options defaults;
  const auto ours = gb::replay_trace(trace, defaults);
  EXPECT_EQ(ours.peak_requested, rec.peak_requested);
  EXPECT_EQ(ours.peak_reserved, rec.peak_reserved);
  // The thread caches change nothing here either.
  defaults.thread_cache_blocks = 0;
  EXPECT_EQ(gb::replay_trace(trace, defaults).peak_reserved, ours.peak_reserved);
}

TEST(Snapshot, AFreeHeldForAnotherStreamTakesEffectWhenItCompletes) {
  // A block used on a side stream (record_stream) is freed at free_requested but held until the
  // side stream's work is done (free_completed): a request between the two cannot take it.
  const auto peak = [](pk::items events) {
    const auto s = gb::parse_torch_snapshot(pk::dumps(snapshot_of_trace(std::move(events))), "s");
    return gb::replay_trace(gb::to_replay_trace(s, 0), {}).peak_reserved;
  };
  const std::int64_t m30 = 30 * MiB;
  EXPECT_EQ(peak({trace_event("alloc", 0x1000, m30), trace_event("free_requested", 0x1000, m30),
                  trace_event("alloc", 0x9000, m30), trace_event("free_completed", 0x1000, m30),
                  trace_event("free_requested", 0x9000, m30),
                  trace_event("free_completed", 0x9000, m30)}),
            60 * MiB);
  EXPECT_EQ(peak({trace_event("alloc", 0x1000, m30), trace_event("free_requested", 0x1000, m30),
                  trace_event("free_completed", 0x1000, m30), trace_event("alloc", 0x9000, m30),
                  trace_event("free_requested", 0x9000, m30),
                  trace_event("free_completed", 0x9000, m30)}),
            30 * MiB);
  // Held frees completing in another order than requested: every block freed once.
  const auto s = gb::parse_torch_snapshot(
      pk::dumps(snapshot_of_trace(
          {trace_event("alloc", 0x1000, m30), trace_event("alloc", 0x2000, m30),
           trace_event("free_requested", 0x1000, m30), trace_event("free_requested", 0x2000, m30),
           trace_event("alloc", 0x3000, m30), trace_event("free_completed", 0x2000, m30),
           trace_event("free_completed", 0x1000, m30), trace_event("free_requested", 0x3000, m30),
           trace_event("free_completed", 0x3000, m30)})),
      "s");
  const auto t = gb::to_replay_trace(s, 0);
  EXPECT_EQ(t.size(), 6u);
  EXPECT_EQ(
      std::count_if(t.begin(), t.end(),
                    [](const gb::replay_event& e) { return e.kind == gb::replay_event::op::free; }),
      3);
  EXPECT_EQ(gb::replay_trace(t, {}).peak_reserved, 90 * MiB);
}

TEST(Snapshot, SizesBeyond64BitsAreAnErrorNeverWrapped) {
  const auto s = gb::parse_torch_snapshot(
      pk::dumps(snapshot_of_trace({trace_event("segment_alloc", 0x1000, INT64_MAX),
                                   trace_event("segment_alloc", 0x2000, INT64_MAX)})),
      "big.pickle");
  try {
    (void)gb::recorded(s, 0);
    ADD_FAILURE() << "no error";
  } catch (const gb::format_error& e) {
    EXPECT_NE(std::string(e.what()).find("beyond 64 bits"), std::string::npos) << e.what();
  }
  try {
    (void)gb::replay_snapshot(s, "big.pickle", 0,
                              gb::policy_list({""}, {}, gb::repeated_policy::refuse));
    ADD_FAILURE() << "no error";
  } catch (const gb::format_error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("big.pickle: ", 0), 0u) << e.what();
  }
  const std::size_t half = SIZE_MAX / 2 + 1;
  EXPECT_THROW((void)gb::peak_requested({{gb::replay_event::op::alloc, 1, half, 0},
                                         {gb::replay_event::op::alloc, 2, half, 0}}),
               gb::format_error);
}

TEST(Snapshot, CtrlCStopsParsingAndReplaying) {
  const std::string bytes = pk::dumps(snapshot_of_trace({trace_event("alloc", 16, 512)}));
  const auto s = gb::parse_torch_snapshot(bytes, "s.pickle");
  const auto trace = gb::mixed_trace();
  gb::install_interrupt_handlers();
  std::raise(SIGINT);
  EXPECT_THROW((void)gb::parse_torch_snapshot(bytes, "s.pickle"), gb::interrupted);
  EXPECT_THROW((void)gb::replay_trace(trace, {}), gb::interrupted);
  EXPECT_THROW((void)gb::peak_requested(trace), gb::interrupted);
  gb::clear_interrupt();
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
}

TEST(SnapshotStream, PreparedAndParallelReplaysGiveTheSameResults) {
  for (const auto& trace : {gb::mixed_trace(20000), gb::transformer_trace(8)}) {
    const auto prepared = gb::prepare_trace(trace);
    EXPECT_EQ(prepared.peak_requested, gb::peak_requested(trace));
    for (const char* conf : {"", "expandable_segments:True", "max_split_size_mb:64"}) {
      const auto o = gb::parse_allocator_options(conf);
      const auto a = gb::replay_trace(trace, o), b = gb::replay_trace(prepared, o);
      EXPECT_EQ(a.peak_reserved, b.peak_reserved) << conf;
      EXPECT_EQ(a.peak_allocated, b.peak_allocated) << conf;
      EXPECT_EQ(a.peak_requested, b.peak_requested) << conf;
      EXPECT_EQ(a.backend_allocations, b.backend_allocations) << conf;
      EXPECT_EQ(a.fragmentation_at_peak, b.fragmentation_at_peak) << conf;
    }
  }
  const auto s = gb::read_torch_snapshot(kData + "/h200_torch_snapshot.pickle");
  const auto confs = gb::replay_policies({"max_split_size_mb:32,garbage_collection_threshold:0.8"});
  const auto strip = [](nlohmann::json j) {
    j.erase("seconds");
    j.erase("events_per_s");
    j.erase("table");
    for (auto& p : j["policies"]) p.erase("seconds");
    return j;
  };
  const auto one = strip(gb::to_json(gb::replay_snapshot(s, "s", 0, confs, 1)));
  for (const unsigned threads : {2u, 3u, 16u})
    EXPECT_EQ(strip(gb::to_json(gb::replay_snapshot(s, "s", 0, confs, threads))), one) << threads;
  EXPECT_EQ(strip(gb::to_json(gb::replay_snapshot(s, "s", 0, confs))), one);
}
