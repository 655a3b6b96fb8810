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
      if (e["pid"] != kHostPid)
        gpu_tracks.insert({e["pid"].get<std::int64_t>(), e["tid"].get<std::int64_t>()});
    }
    if (e["ph"] == "s") flow_ends[e["id"].get<std::uint64_t>()] += 1;
    if (e["ph"] == "f") flow_ends[e["id"].get<std::uint64_t>()] += 10;
  }
  const auto& k = by_name.at("lcg_checksum_kernel");
  EXPECT_DOUBLE_EQ(k["ts"].get<double>(), 9.0);  // (10000 - 1000) ns in us
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
  EXPECT_EQ(flow_ends,
            (std::map<std::uint64_t, int>{{11, 11}, {12, 11}}));  // one start + one end each
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

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#if GPU_BASICS_TEST_HAVE_ZLIB
#include <zlib.h>
#endif

#include "gpu_basics/core/errors.hpp"

TEST(TraceWriter, EscapesNamesSortsByTimeAndPutsMetadataFirst) {
  trace_writer w;
  w.slice("later", "c", 20.0, 1.0, 0, 1);
  w.slice("say \"hi\"\\\n\x01", "c", 10.0005, 2.0, 0, 1, {{"k", "v"}});
  w.name_thread(0, 1, "stream \"1\"", 3);
  w.slice("negative", "c", -1.5, -3.0, 0, 1);
  const std::string text = w.to_string();
  const auto j = nlohmann::json::parse(text);
  const auto& ev = j["traceEvents"];
  ASSERT_EQ(ev.size(), 5u);
  EXPECT_EQ(ev[0]["ph"], "M");
  EXPECT_EQ(ev[0]["args"]["name"], "stream \"1\"");
  EXPECT_EQ(ev[1]["ph"], "M");
  EXPECT_EQ(ev[2]["name"], "negative");
  EXPECT_DOUBLE_EQ(ev[2]["ts"].get<double>(), -1.5);
  EXPECT_DOUBLE_EQ(ev[2]["dur"].get<double>(), 0.0);  // a negative duration is clamped
  EXPECT_EQ(ev[3]["name"], "say \"hi\"\\\n\x01");
  EXPECT_DOUBLE_EQ(ev[3]["ts"].get<double>(), 10.001);  // nanosecond resolution, rounded
  EXPECT_EQ(ev[3]["args"]["k"], "v");
  EXPECT_EQ(ev[4]["name"], "later");
}

TEST(TraceWriter, CountersAreOneSeriesPerNameWithNullForNoValue) {
  trace_writer w;
  w.counter("power_w", 0.0, 5, 120.5);
  w.counter("power_w", 10.0, 5, 700.25);
  w.counter("allocated_bytes", 5.0, 6, 1048576);
  w.counter("power_w", 20.0, 5, std::nan(""));
  const auto j = w.to_json();
  std::map<std::string, std::vector<nlohmann::json>> series;
  for (const auto& e : j["traceEvents"]) {
    ASSERT_EQ(e["ph"], "C");
    ASSERT_EQ(e["args"].size(), 1u);  // one series per counter event
    series[e["name"].get<std::string>()].push_back(e["args"][e["name"].get<std::string>()]);
  }
  ASSERT_EQ(series["power_w"].size(), 3u);
  EXPECT_EQ(series["power_w"][1], 700.25);
  EXPECT_TRUE(series["power_w"][2].is_null());
  EXPECT_EQ(series["allocated_bytes"][0], 1048576);
}

TEST(TraceWriter, SlicesOnATrackNestOrFollowNeverOverlapPartly) {
  // add_activity's slices per GPU track come from one stream: in stream order they never
  // overlap partly (which Perfetto would draw wrongly).
  trace_writer w;
  (void)add_activity(w, fabricated(), 0);
  std::map<std::pair<std::int64_t, std::int64_t>, std::vector<std::pair<double, double>>> tracks;
  const auto j = w.to_json();
  for (const auto& e : j["traceEvents"])
    if (e["ph"] == "X")
      tracks[{e["pid"].get<std::int64_t>(), e["tid"].get<std::int64_t>()}].push_back(
          {e["ts"].get<double>(), e["ts"].get<double>() + e["dur"].get<double>()});
  for (const auto& [track, s] : tracks)
    for (std::size_t i = 0; i < s.size(); ++i)
      for (std::size_t k = i + 1; k < s.size(); ++k) {
        const bool disjoint = s[k].first >= s[i].second || s[i].first >= s[k].second;
        const bool nested = (s[k].first >= s[i].first && s[k].second <= s[i].second) ||
                            (s[i].first >= s[k].first && s[i].second <= s[k].second);
        EXPECT_TRUE(disjoint || nested) << "track " << track.first << "/" << track.second;
      }
}

TEST(TraceWriter, GzipPathIsCompressedAndRoundTrips) {
  trace_writer w;
  for (int i = 0; i < 1000; ++i)
    w.slice("kernel " + std::to_string(i % 7), "kernel", i * 2.0, 1.0, 0, 1);
  const auto dir = std::filesystem::temp_directory_path() / "gpu_basics_trace_gz";
  std::filesystem::remove_all(dir);
  const std::string path = (dir / "t.json.gz").string();
  if (!trace_writer::gzip_supported()) {
    EXPECT_THROW(w.write(path), io_error);
    EXPECT_FALSE(std::filesystem::exists(path));
    return;
  }
  w.write(path);
  std::ifstream in(path, std::ios::binary);
  unsigned char magic[2] = {0, 0};
  in.read(reinterpret_cast<char*>(magic), 2);
  EXPECT_EQ(magic[0], 0x1f);
  EXPECT_EQ(magic[1], 0x8b);
  EXPECT_LT(std::filesystem::file_size(path), w.to_string().size() / 5);
#if GPU_BASICS_TEST_HAVE_ZLIB
  gzFile f = gzopen(path.c_str(), "rb");
  ASSERT_NE(f, nullptr);
  std::string text;
  char buf[65536];
  for (int n; (n = gzread(f, buf, sizeof buf)) > 0;) text.append(buf, static_cast<std::size_t>(n));
  gzclose(f);
  EXPECT_EQ(text, w.to_string());
#endif
}
