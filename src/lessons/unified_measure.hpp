// Shared by the unified lesson's measuring files: managed buffers, memory locations, checks and
// the parts measured outside unified_measure.cpp. Private to the module's CUDA edge.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "gpu_basics/core/config.hpp"
#include "gpu_basics/core/cuda.hpp"
#include "gpu_basics/core/sampling.hpp"
#include "gpu_basics/core/shared_gpu.hpp"
#include "gpu_basics/lessons/lesson.hpp"
#include "gpu_basics/lessons/unified.hpp"

namespace gpu_basics::lessons {

namespace unified_detail {

/// The median of `v` (0 when empty).
[[nodiscard]] double median_of(std::vector<double> v);

/// The rule of a figure timed at most `most` times (unified.repetitions, the oversubscription's
/// passes): benchmark.*'s rule capped at `most`, without warm-up runs of its own (a loop that warms
/// up does so itself, as before), so the lesson takes no longer than with a fixed count.
[[nodiscard]] stopping_rule rule_of_at_most(const config& cfg, int most);

/// Throws the config_error of `key` (at the place it was set) with `message`.
[[noreturn]] void fail_key(const config& cfg, const std::string& key, const std::string& message);

/// Throws verification_error naming `what` unless `wrong` is 0.
void expect_intact(unsigned long long wrong, const std::string& what);

/// Owned managed memory (cudaMallocManaged, attached globally).
class managed_buffer {
 public:
  /// @throws out_of_memory, cuda_error.
  explicit managed_buffer(std::size_t bytes);
  ~managed_buffer();
  managed_buffer(const managed_buffer&) = delete;
  managed_buffer& operator=(const managed_buffer&) = delete;
  [[nodiscard]] void* get() const noexcept { return ptr_; }
  [[nodiscard]] std::size_t size() const noexcept { return bytes_; }

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

/// The location of GPU `device`, and the host's, for prefetches and advice (CUDA 13 signatures).
[[nodiscard]] cudaMemLocation device_location(int device);
[[nodiscard]] cudaMemLocation host_location();

/// The plan for a step of the lesson that wants `wanted` bytes of the `free` device memory,
/// with the other processes NVML lists on the device now (plan_memory_step()); the line, when
/// there is one, goes to the log as a warning.
[[nodiscard]] memory_step plan_step(const context& ctx, std::string step, std::uint64_t wanted,
                                    std::uint64_t free, bool shrinkable,
                                    std::uint64_t min_bytes = 0);

}  // namespace unified_detail

/// The ledger: `gpu-basics ledger-probe` (ctx.self_exe) run as a child once with lazy and once
/// with eager module loading (ledger_probe.cpp).
[[nodiscard]] ledger_result measure_ledger(const context& ctx);

/// The five beliefs (unified_beliefs_measure.cpp). `wrong` is a counter for the checks.
/// Steps shrunk or skipped beside other processes are added to `steps`.
[[nodiscard]] beliefs_result measure_beliefs(context& ctx, cuda_stream& s, device_counter& wrong,
                                             std::vector<memory_step>& steps);

}  // namespace gpu_basics::lessons
