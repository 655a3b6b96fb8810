// Row labels, column keys and table ids that a lesson's tables print and that reading a schema-1
// file (src/lessons/v1/) matches against: one definition for both sides. Private to the module.
#pragma once

#include <cstddef>
#include <string>

#include <fmt/format.h>

#include "gpu_basics/lessons/double_buffer.hpp"
#include "gpu_basics/lessons/memory.hpp"
#include "gpu_basics/lessons/multi_gpu.hpp"
#include "gpu_basics/lessons/profile.hpp"

namespace gpu_basics::lessons::labels {

// ---- memory: the "peak" table's quantities, the "fragmentation" table's sources -------------

inline constexpr const char* kPeakWeights = "allocated before the pass (weights)";
inline constexpr const char* kPeakAllocated = "peak allocated during the pass";
inline constexpr const char* kPeakReserved = "peak reserved during the pass";
inline constexpr const char* kPeakSum = "sum of all allocations in the pass";

inline constexpr const char* kNewSegment = "a new segment (cudaMalloc)";
inline constexpr const char* kFromCache = "the cache";

// ---- profile: the timing_methods rows --------------------------------------------------------

// The timing_methods rows: label, what it measures, the result's field.
struct timing_row {
  const char* method;
  const char* measures;
  summary timing_methods_result::*field;
};
inline constexpr timing_row kTimingRows[] = {
    {"host clock around the launch", "only the launch: the call returns before the kernel runs",
     &timing_methods_result::host_no_sync_s},
    {"host clock + cudaStreamSynchronize", "launch + kernel + the wake-up of the waiting thread",
     &timing_methods_result::host_sync_s},
    {"CUDA events around the kernel", "the kernel on the GPU's own clock",
     &timing_methods_result::events_s}};

// ---- multi_gpu: the GPU x GPU tables' column keys --------------------------------------------

inline std::string to_gpu_key(std::size_t j) {
  return fmt::format("to_gpu_{}", j);
}

// ---- double_buffer: the table's id -----------------------------------------------------------

inline constexpr const char* kDoubleBufferTable = "double_buffer";

}  // namespace gpu_basics::lessons::labels
