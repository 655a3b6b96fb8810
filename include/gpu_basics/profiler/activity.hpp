// GPU and CPU activity as records (what CUPTI's activity API reports: kernels, copies, memsets,
// runtime API calls, user ranges), and their conversion into a Chrome/Perfetto trace: GPU tracks
// with pid = device and tid = stream, CPU tracks per thread, a flow from each launch to its
// kernel by correlation id, and dropped-record counts in the metadata. Host-only: tests feed it
// fabricated records; a CUPTI source fills it on a GPU.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gpu_basics/profiler/trace_writer.hpp"

namespace gpu_basics {

struct kernel_record {
  std::string name;
  std::uint64_t start_ns = 0, end_ns = 0;  // on the CPU's clock
  std::uint32_t device = 0, stream = 0, correlation = 0;
  std::int32_t grid[3] = {0, 0, 0}, block[3] = {0, 0, 0};
  std::int32_t registers_per_thread = 0;
  std::int32_t shared_memory_bytes = 0;  // static + dynamic
};

enum class memcpy_kind { h2d, d2h, d2d, h2h, peer, other };

struct memcpy_record {
  memcpy_kind kind = memcpy_kind::other;
  std::uint64_t bytes = 0;
  std::uint64_t start_ns = 0, end_ns = 0;
  std::uint32_t device = 0, stream = 0, correlation = 0;
  bool pinned = false;  // host side page-locked
};

struct memset_record {
  std::uint64_t bytes = 0;
  std::uint64_t start_ns = 0, end_ns = 0;
  std::uint32_t device = 0, stream = 0, correlation = 0;
};

/// A runtime/driver API call or synchronization on a CPU thread.
struct api_record {
  std::string name;
  std::uint64_t start_ns = 0, end_ns = 0;
  std::uint64_t thread = 0;
  std::uint32_t correlation = 0;
};

/// A CPU thread waiting for the GPU (stream, event or context synchronize; a stream waiting on
/// an event), tied to its API call by correlation id.
struct sync_record {
  std::string what;  // "stream synchronize", ...
  std::uint64_t start_ns = 0, end_ns = 0;
  std::uint32_t correlation = 0, stream = 0;
};

/// A user range (NVTX or gpu_basics' scoped range) on a CPU thread.
struct range_record {
  std::string name;
  std::uint64_t start_ns = 0, end_ns = 0;
  std::uint64_t thread = 0;
};

struct activity_log {
  std::vector<kernel_record> kernels;
  std::vector<memcpy_record> memcpys;
  std::vector<memset_record> memsets;
  std::vector<api_record> api_calls;
  std::vector<range_record> ranges;
  std::vector<sync_record> syncs;
  std::uint64_t dropped_records = 0;
  std::string source = "cupti";  // or why there is no GPU activity ("CUPTI unavailable: ...")
};

/// CUPTI's names: "HtoD", "DtoH", "DtoD", "HtoH", "PtoP", "other".
[[nodiscard]] std::string_view to_string(memcpy_kind k) noexcept;

/// Keeps the records that start in [from_ns, to_ns) (a schedule's active window); ranges and API
/// calls by their start, GPU records by theirs.
void keep_window(activity_log& log, std::uint64_t from_ns, std::uint64_t to_ns);
/// Counts per category: kernels, memcpys, memsets, api_calls, syncs, ranges, dropped.
[[nodiscard]] nlohmann::json activity_counts(const activity_log& log);

/// The CPU process's pid in traces (GPU devices use their index).
inline constexpr std::int64_t kHostPid = 1000000;

/// Writes the log into `out`; timestamps become microseconds since `origin_ns`. Returns the
/// number of launch→kernel flows written.
std::size_t add_activity(trace_writer& out, const activity_log& log, std::uint64_t origin_ns);

}  // namespace gpu_basics
