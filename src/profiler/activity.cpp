#include "gpu_basics/profiler/activity.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

namespace gpu_basics {

std::string_view to_string(memcpy_kind k) noexcept {
  switch (k) {
    case memcpy_kind::h2d:
      return "HtoD";
    case memcpy_kind::d2h:
      return "DtoH";
    case memcpy_kind::d2d:
      return "DtoD";
    case memcpy_kind::h2h:
      return "HtoH";
    case memcpy_kind::peer:
      return "PtoP";
    case memcpy_kind::other:
      return "other";
  }
  return "?";
}

void keep_window(activity_log& log, std::uint64_t from_ns, std::uint64_t to_ns) {
  const auto outside = [&](const auto& r) { return r.start_ns < from_ns || r.start_ns >= to_ns; };
  const auto prune = [&](auto& v) {
    v.erase(std::remove_if(v.begin(), v.end(), outside), v.end());
  };
  prune(log.kernels);
  prune(log.memcpys);
  prune(log.memsets);
  prune(log.api_calls);
  prune(log.ranges);
  prune(log.syncs);
}

nlohmann::json activity_counts(const activity_log& log) {
  return {{"kernels", log.kernels.size()},
          {"memcpys", log.memcpys.size()},
          {"memsets", log.memsets.size()},
          {"api_calls", log.api_calls.size()},
          {"syncs", log.syncs.size()},
          {"ranges", log.ranges.size()},
          {"dropped_records", log.dropped_records}};
}

std::size_t add_activity(trace_writer& out, const activity_log& log, std::uint64_t origin_ns) {
  const auto us = [&](std::uint64_t ns) {
    return (static_cast<double>(ns) - static_cast<double>(origin_ns)) * 1e-3;
  };
  const auto dur = [](std::uint64_t a, std::uint64_t b) {
    return b > a ? static_cast<double>(b - a) * 1e-3 : 0.0;
  };
  std::set<std::pair<std::int64_t, std::int64_t>> gpu_tracks;
  std::set<std::int64_t> devices, threads;
  std::map<std::uint32_t, const api_record*> launches;  // correlation -> API call

  for (const auto& a : log.api_calls) {
    out.slice_raw(a.name, "cuda_runtime", us(a.start_ns), dur(a.start_ns, a.end_ns), kHostPid,
                  static_cast<std::int64_t>(a.thread),
                  json_text{fmt::format("{{\"correlation\":{}}}", a.correlation)});
    threads.insert(static_cast<std::int64_t>(a.thread));
    if (a.correlation) launches[a.correlation] = &a;
  }
  for (const auto& r : log.ranges) {
    out.slice(r.name, "user_range", us(r.start_ns), dur(r.start_ns, r.end_ns), kHostPid,
              static_cast<std::int64_t>(r.thread));
    threads.insert(static_cast<std::int64_t>(r.thread));
  }
  for (const auto& y : log.syncs) {
    const auto it = launches.find(y.correlation);
    const auto thread =
        it != launches.end() ? static_cast<std::int64_t>(it->second->thread) : std::int64_t{0};
    out.slice_raw(
        "wait: " + y.what, "cuda_sync", us(y.start_ns), dur(y.start_ns, y.end_ns), kHostPid, thread,
        json_text{fmt::format("{{\"stream\":{},\"correlation\":{}}}", y.stream, y.correlation)});
    threads.insert(thread);
  }
  std::size_t flows = 0;
  const auto link = [&](std::uint32_t corr, std::uint64_t gpu_start, std::int64_t pid,
                        std::int64_t tid) {
    const auto it = launches.find(corr);
    if (it == launches.end()) return;
    // The flow starts inside the launch call and ends inside the GPU slice.
    const api_record& a = *it->second;
    out.flow(corr, "launch", us(a.start_ns) + dur(a.start_ns, a.end_ns) / 2, kHostPid,
             static_cast<std::int64_t>(a.thread), us(gpu_start), pid, tid);
    ++flows;
  };
  for (const auto& k : log.kernels) {
    const auto pid = static_cast<std::int64_t>(k.device), tid = static_cast<std::int64_t>(k.stream);
    out.slice_raw(k.name, "kernel", us(k.start_ns), dur(k.start_ns, k.end_ns), pid, tid,
                  json_text{fmt::format(
                      "{{\"grid\":[{},{},{}],\"block\":[{},{},{}],\"registers_per_thread\":{},"
                      "\"shared_memory_bytes\":{},\"stream\":{},\"correlation\":{}}}",
                      k.grid[0], k.grid[1], k.grid[2], k.block[0], k.block[1], k.block[2],
                      k.registers_per_thread, k.shared_memory_bytes, k.stream, k.correlation)});
    gpu_tracks.insert({pid, tid});
    devices.insert(pid);
    link(k.correlation, k.start_ns, pid, tid);
  }
  for (const auto& m : log.memcpys) {
    const auto pid = static_cast<std::int64_t>(m.device), tid = static_cast<std::int64_t>(m.stream);
    const double d = dur(m.start_ns, m.end_ns);
    out.slice_raw(
        fmt::format("Memcpy {} ({})", to_string(m.kind), m.pinned ? "pinned" : "pageable"),
        "memcpy", us(m.start_ns), d, pid, tid,
        json_text{
            d > 0
                ? fmt::format("{{\"bytes\":{},\"bandwidth_bytes_per_s\":{},\"correlation\":{}}}",
                              m.bytes, static_cast<double>(m.bytes) / (d * 1e-6), m.correlation)
                : fmt::format("{{\"bytes\":{},\"bandwidth_bytes_per_s\":null,\"correlation\":{}}}",
                              m.bytes, m.correlation)});
    gpu_tracks.insert({pid, tid});
    devices.insert(pid);
    link(m.correlation, m.start_ns, pid, tid);
  }
  for (const auto& m : log.memsets) {
    const auto pid = static_cast<std::int64_t>(m.device), tid = static_cast<std::int64_t>(m.stream);
    out.slice("Memset", "memset", us(m.start_ns), dur(m.start_ns, m.end_ns), pid, tid,
              {{"bytes", m.bytes}, {"correlation", m.correlation}});
    gpu_tracks.insert({pid, tid});
    devices.insert(pid);
    link(m.correlation, m.start_ns, pid, tid);
  }
  for (std::int64_t d : devices) out.name_process(d, fmt::format("GPU {}", d), static_cast<int>(d));
  for (const auto& [pid, tid] : gpu_tracks)
    out.name_thread(pid, tid, fmt::format("stream {}", tid), static_cast<int>(tid));
  out.name_process(kHostPid, "CPU", 1000);
  for (std::int64_t t : threads) out.name_thread(kHostPid, t, fmt::format("thread {}", t));
  out.metadata("activity_source", log.source);
  out.metadata("dropped_records", log.dropped_records);
  return flows;
}

}  // namespace gpu_basics
