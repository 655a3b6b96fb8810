// NCCL collectives (all-reduce, all-gather, reduce-scatter) over the visible GPUs, one
// communicator per GPU driven from one thread (ncclCommInitAll and grouped calls). NCCL is loaded
// at run time with dlopen, like NVML: nothing is needed to build, and without libnccl the lesson
// says so and goes on. GPU_BASICS_NCCL_LIBRARY names the library file if it is not on the loader
// path. NVLink SHARP (multicast) is kept off: NCCL_NVLS_ENABLE=0 is set before NCCL starts.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gpu_basics/core/sampling.hpp"
#include "gpu_basics/core/stats.hpp"
#include "gpu_basics/transfer/multi_gpu.hpp"

namespace gpu_basics {

struct collective_measurement {
  collective op = collective::all_reduce;
  std::uint64_t bytes = 0;  // as nccl-tests counts them (multi_gpu.hpp)
  int ranks = 1;
  summary time_s;
  collective_rate rate;  // from the median time
  std::uint64_t verified_elements = 0;
  sampling_outcome sampling;  // how many runs the stopping rule took and why it stopped
};

class nccl_collectives {
 public:
  /// Loads NCCL and creates a communicator over `devices`; nullptr and *why when NCCL is missing
  /// or cannot start.
  /// @throws logic_error when devices is empty; cuda_error, out_of_memory when a rank's device
  /// or buffers cannot be set up.
  static std::unique_ptr<nccl_collectives> open(const std::vector<int>& devices, std::string* why);
  /// Destroys the communicators.
  ~nccl_collectives();
  nccl_collectives(const nccl_collectives&) = delete;
  nccl_collectives& operator=(const nccl_collectives&) = delete;

  /// NCCL's version as "2.27.3".
  [[nodiscard]] std::string version() const;
  /// Ranks of the communicator: one per device.
  [[nodiscard]] int ranks() const noexcept;
  /// float32 sum (reductions) of `bytes`, timed with events on every rank's stream (the slowest
  /// rank's time), sampled by `rule` (core/sampling.hpp: rule.warmup untimed runs, then runs
  /// until it stops), median kept; the result of the last run is checked element by element on
  /// every rank. Sizes that do not split into ranks x 4 bytes are rounded down to one that does.
  /// @throws verification_error on a mismatch; nccl_error when an NCCL call fails; cuda_error,
  /// out_of_memory; logic_error for a rule with min_samples < 1, max_samples < min_samples or
  /// warmup < 0 (the sampler throws on a max_noise or timeout_s <= 0).
  [[nodiscard]] collective_measurement run(collective op, std::uint64_t bytes,
                                           const stopping_rule& rule);

  struct impl;

 private:
  explicit nccl_collectives(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

}  // namespace gpu_basics
