#include <gtest/gtest.h>

#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "gpu_basics/profiler/activity.hpp"

using namespace gpu_basics;

namespace {
activity_log fabricated() {
  activity_log log;
  log.api_calls.push_back({"cudaLaunchKernel", 1000, 5000, 7, 11});
  log.api_calls.push_back({"cudaMemcpyAsync", 6000, 8000, 7, 12});
  log.api_calls.push_back({"cudaStreamSynchronize", 9000, 40000, 7, 0});
  kernel_record k;
  k.name = "lcg_checksum_kernel";
  k.start_ns = 10000;
  k.end_ns = 30000;
  k.device = 0;
  k.stream = 13;
  k.correlation = 11;
  k.grid[0] = 1056;
  k.block[0] = 256;
  k.registers_per_thread = 32;
  log.kernels.push_back(k);
  memcpy_record m;
  m.kind = memcpy_kind::h2d;
  m.bytes = 1 << 20;
  m.start_ns = 30000;
  m.end_ns = 50000;
  m.stream = 14;
  m.correlation = 12;
  m.pinned = true;
  log.memcpys.push_back(m);
  log.memsets.push_back({4096, 51000, 52000, 0, 14, 0});
  log.ranges.push_back({"step 0", 500, 45000, 7});
  log.dropped_records = 3;
  return log;
}
}  // namespace

TEST(Activity, RecordsBecomeSlicesOnDeviceStreamAndThreadTracks) {
  trace_writer w;
  const auto flows = add_activity(w, fabricated(), 1000);
  EXPECT_EQ(flows, 2u);  // the kernel and the copy each have a launch
  const auto j = nlohmann::json::parse(w.to_json().dump());
  std::map<std::string, nlohmann::json> by_name;
  std::set<std::pair<std::int64_t, std::int64_t>> gpu_tracks;
  std::map<std::uint64_t, int> flow_ends;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "X") {
      by_name[e["name"].get<std::string>()] = e;
      if (e["pid"] != kHostPid) gpu_tracks.insert({e["pid"].get<std::int64_t>(), e["tid"].get<std::int64_t>()});
    }
    if (e["ph"] == "s") flow_ends[e["id"].get<std::uint64_t>()] += 1;
    if (e["ph"] == "f") flow_ends[e["id"].get<std::uint64_t>()] += 10;
  }
  const auto& k = by_name.at("lcg_checksum_kernel");
  EXPECT_DOUBLE_EQ(k["ts"].get<double>(), 9.0);   // (10000 - 1000) ns in us
  EXPECT_DOUBLE_EQ(k["dur"].get<double>(), 20.0);
  EXPECT_EQ(k["pid"], 0);
  EXPECT_EQ(k["tid"], 13);
  EXPECT_EQ(k["args"]["grid"][0], 1056);
  EXPECT_EQ(k["args"]["registers_per_thread"], 32);
  const auto& c = by_name.at("Memcpy HtoD (pinned)");
  EXPECT_EQ(c["args"]["bytes"], 1 << 20);
  EXPECT_NEAR(c["args"]["bandwidth_bytes_per_s"].get<double>(), (1 << 20) / 20e-6, 1.0);
  EXPECT_EQ(by_name.at("cudaLaunchKernel")["pid"], kHostPid);
  EXPECT_EQ(by_name.at("step 0")["cat"], "user_range");
  EXPECT_EQ(gpu_tracks, (std::set<std::pair<std::int64_t, std::int64_t>>{{0, 13}, {0, 14}}));
  EXPECT_EQ(flow_ends, (std::map<std::uint64_t, int>{{11, 11}, {12, 11}}));  // one start + one end each
  EXPECT_EQ(j["metadata"]["dropped_records"], 3);
  EXPECT_EQ(j["metadata"]["activity_source"], "cupti");
}

TEST(Activity, ALaunchFlowEndsInsideItsKernel) {
  trace_writer w;
  (void)add_activity(w, fabricated(), 0);
  const auto j = w.to_json();
  double kernel_ts = -1, kernel_end = -1, flow_end = -1;
  for (const auto& e : j["traceEvents"]) {
    if (e["name"] == "lcg_checksum_kernel") {
      kernel_ts = e["ts"].get<double>();
      kernel_end = kernel_ts + e["dur"].get<double>();
    }
    if (e["ph"] == "f" && e["id"] == 11) flow_end = e["ts"].get<double>();
  }
  EXPECT_GE(flow_end, kernel_ts);
  EXPECT_LE(flow_end, kernel_end);
}

TEST(Activity, WithoutGpuRecordsTheTraceIsCpuOnlyAndSaysWhy) {
  activity_log log;
  log.source = "CUPTI unavailable: another profiler holds the subscriber";
  log.ranges.push_back({"step 0", 0, 1000, 1});
  trace_writer w;
  EXPECT_EQ(add_activity(w, log, 0), 0u);
  const auto j = w.to_json();
  for (const auto& e : j["traceEvents"])
    if (e["ph"] == "X") {
      EXPECT_EQ(e["pid"], kHostPid);
    }
  EXPECT_EQ(j["metadata"]["activity_source"], log.source);
}
