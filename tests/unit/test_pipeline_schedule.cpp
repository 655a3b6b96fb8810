#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include <nlohmann/json.hpp>

#include "gpu_basics/profiler/trace_writer.hpp"
#include "gpu_basics/transfer/pipeline_schedule.hpp"

using namespace gpu_basics;

namespace {
/// Replays a schedule and checks what it must guarantee: compute i after copy i, and no copy
/// into a buffer before the compute of its previous batch ended. Returns the violations.
int violations(const std::vector<simulated_batch>& t, std::size_t depth) {
  int bad = 0;
  for (std::size_t i = 0; i < t.size(); ++i) {
    if (t[i].compute_start < t[i].copy_end) ++bad;
    if (i >= depth && t[i].copy_start < t[i - depth].compute_end) ++bad;
  }
  return bad;
}
}  // namespace

TEST(PipelineSchedule, EveryBatchIsCopiedThenComputedInOrder) {
  for (std::size_t depth : {1u, 2u, 3u})
    for (std::size_t batches : {0u, 1u, 2u, 5u}) {
      const auto steps = prefetch_schedule(batches, depth);
      std::vector<int> copied(batches, 0), computed(batches, 0);
      for (const auto& s : steps) {
        EXPECT_EQ(s.buffer, s.op == pipeline_op::copy_wait_compute ? (s.batch + depth) % depth
                                                                   : s.batch % depth);
        if (s.op == pipeline_op::copy) ++copied[s.batch];
        if (s.op == pipeline_op::compute) {
          EXPECT_EQ(copied[s.batch], 1) << "computed before copied";
          ++computed[s.batch];
        }
      }
      for (std::size_t i = 0; i < batches; ++i) {
        EXPECT_EQ(copied[i], 1);
        EXPECT_EQ(computed[i], 1);
      }
    }
}

TEST(PipelineSchedule, BufferReuseWaitsForThePreviousCompute) {
  const auto steps = prefetch_schedule(5, 2);
  // Batch 2 reuses buffer 0: the copy stream first waits for compute(0).
  const std::vector<pipeline_step> head = {{pipeline_op::copy, 0, 0},
                                           {pipeline_op::compute_wait_copy, 0, 0},
                                           {pipeline_op::compute, 0, 0},
                                           {pipeline_op::copy, 1, 1},
                                           {pipeline_op::compute_wait_copy, 1, 1},
                                           {pipeline_op::compute, 1, 1},
                                           {pipeline_op::copy_wait_compute, 0, 0},
                                           {pipeline_op::copy, 2, 0}};
  ASSERT_GE(steps.size(), head.size());
  EXPECT_TRUE(std::equal(head.begin(), head.end(), steps.begin()));
  // Fewer batches than buffers: nothing waits for a release.
  for (const auto& s : prefetch_schedule(2, 3)) EXPECT_NE(s.op, pipeline_op::copy_wait_compute);
}

TEST(PipelineSchedule, SimulatedTimelinesRespectDependenciesAtEveryDepth) {
  for (std::size_t depth : {1u, 2u, 3u})
    for (double compute : {0.25, 1.0, 4.0}) {
      const auto t = simulate_schedule(prefetch_schedule(12, depth), 12, 1.0, compute, false);
      EXPECT_EQ(violations(t, depth), 0) << depth << " " << compute;
    }
}

TEST(PipelineSchedule, WithoutTheReleaseWaitACopyOverwritesABufferInUse) {
  // Compute-bound, depth 2: the copy stream runs ahead and refills buffer 0 during compute(0).
  const auto t =
      simulate_schedule(prefetch_schedule(8, 2, /*wait_for_release=*/false), 8, 1.0, 3.0, false);
  EXPECT_GT(violations(t, 2), 0);
}

TEST(PipelineSchedule, DoubleBufferingReachesTheIdealSerialDoesNot) {
  const std::size_t n = 16;
  for (double compute : {0.5, 1.0, 2.0}) {
    const auto dbl = simulate_schedule(prefetch_schedule(n, 2), n, 1.0, compute, false);
    const auto ser = simulate_schedule(serial_schedule(n), n, 1.0, compute, true);
    EXPECT_DOUBLE_EQ(dbl.back().compute_end, ideal_pipeline_seconds(n, 1.0, compute)) << compute;
    EXPECT_DOUBLE_EQ(ser.back().compute_end, static_cast<double>(n) * (1.0 + compute));
  }
  // Depth 1 overlaps nothing: it is the serial time.
  const auto one = simulate_schedule(prefetch_schedule(n, 1), n, 1.0, 1.0, false);
  EXPECT_DOUBLE_EQ(one.back().compute_end, 2.0 * static_cast<double>(n));
  EXPECT_DOUBLE_EQ(ideal_pipeline_seconds(16, 1.0, 1.0), 17.0);
  EXPECT_DOUBLE_EQ(ideal_pipeline_seconds(0, 1.0, 1.0), 0.0);
}

TEST(TraceWriter, ChromeTraceWithNamedTracksSortedSlicesAndCounters) {
  trace_writer w;
  w.name_process(1, "double (compute/copy 1)");
  w.name_thread(1, 1, "copy stream");
  w.name_thread(1, 2, "compute stream");
  w.slice("compute batch 0", "kernel", 20.0, 5.0, 1, 2, {{"batch", 0}});
  w.slice("copy batch 0", "memcpy", 10.0, 10.0, 1, 1);
  w.slice("copy batch 1", "memcpy", 20.0, 10.0, 1, 1);
  w.counter("allocated_bytes", 15.0, 1, 1024.0);
  w.metadata("dropped_records", 0);
  const nlohmann::json j = nlohmann::json::parse(w.to_json().dump());  // valid JSON text
  const auto& ev = j["traceEvents"];
  ASSERT_EQ(ev.size(), 7u);
  std::set<std::int64_t> tids;
  double last_ts = -1;
  bool seen_slice = false;
  for (const auto& e : ev) {
    if (e["ph"] == "M") {
      EXPECT_FALSE(seen_slice) << "metadata after slices";
      continue;
    }
    seen_slice = true;
    EXPECT_GE(e["ts"].get<double>(), last_ts);
    last_ts = e["ts"].get<double>();
    if (e["ph"] == "X") {
      tids.insert(e["tid"].get<std::int64_t>());
      EXPECT_GE(e["dur"].get<double>(), 0.0);
    }
    if (e["ph"] == "C") {
      EXPECT_EQ(e["args"]["allocated_bytes"], 1024.0);
    }
  }
  EXPECT_EQ(tids, (std::set<std::int64_t>{1, 2}));
  EXPECT_EQ(j["metadata"]["dropped_records"], 0);
}
