// libFuzzer harness for PyTorch memory snapshots: the bytes as a pickle read the way replay reads
// one, then its busiest device's allocations replayed under the defaults and one other policy.
// The only exception allowed out is format_error (bad input, exit 2); any other, a sanitizer
// report, a run over the time limit or memory over the RSS limit is a finding.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/snapshot/policy_sweep.hpp"
#include "gpu_basics/snapshot/snapshot.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    const gpu_basics::torch_snapshot s = gpu_basics::parse_torch_snapshot(bytes, "fuzz.pickle");
    static const auto policies =
        gpu_basics::policy_list({"", "max_split_size_mb:64", "expandable_segments:True"}, {},
                                gpu_basics::repeated_policy::refuse);
    (void)gpu_basics::replay_snapshot(s, "fuzz.pickle", s.busiest_device(), policies);
  } catch (const gpu_basics::format_error&) {
    // the one expected answer to bad input
  }
  return 0;
}
