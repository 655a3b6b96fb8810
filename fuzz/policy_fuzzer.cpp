// libFuzzer harness for allocator policies: each line of the bytes a --policy string (up to
// kMaxPolicies), checked the way replay checks them (replay_policies: blank, unparsable or
// duplicate confs are refused), then each parsed policy written back as a conf string (which must
// read back as the same policy) and replayed over a small synthetic trace, as replay_snapshot
// replays a snapshot's: garbage_collection_threshold under the reserved limit the default policy
// needed, and running out of memory is a policy's result, not an error. The only exception allowed
// out of the checks is logic_error (a bad --policy, exit 2); any other, a conf that does not read
// back, a sanitizer report, a run over the time limit or memory over the RSS limit is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/memory/caching_allocator.hpp"
#include "gpu_basics/snapshot/policy_sweep.hpp"
#include "gpu_basics/snapshot/replay.hpp"

namespace {

constexpr std::size_t kMaxPolicies = 4;

/// A short mixed trace (512 B - 32 MiB, two streams), then requests in the rounding intervals of
/// GiBs up to the last (from 32 GiB), freed, and one again after them. (Larger requests cost the
/// expandable policies a map and an unmap per 2 MiB page: time, not coverage.)
const std::vector<gpu_basics::replay_event>& trace() {
  static const std::vector<gpu_basics::replay_event> t = [] {
    using gpu_basics::replay_event;
    auto v = gpu_basics::mixed_trace(192, 42);
    for (std::size_t i = 0; i < v.size(); i += 3) v[i].stream = 1;
    constexpr std::size_t kGiB = std::size_t{1} << 30;
    const std::size_t large[] = {3 * kGiB + 1, 40 * kGiB + 12345};
    std::uint64_t id = 1000;
    for (const std::size_t bytes : large) v.push_back({replay_event::op::alloc, id++, bytes, 0});
    for (std::uint64_t i = 1000; i < id; ++i) v.push_back({replay_event::op::free, i, 0, 0});
    v.push_back({replay_event::op::alloc, id, 2 * kGiB + 513, 0});
    return v;
  }();
  return t;
}

/// What the defaults reserve at their peak: the reserved limit of garbage collection policies.
std::size_t default_peak() {
  static const std::size_t peak = gpu_basics::replay_trace(trace(), {}).peak_reserved;
  return peak;
}

[[noreturn]] void finding(const std::string& conf, const std::string& what) {
  std::fprintf(stderr, "policy '%s': %s\n", conf.c_str(), what.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> user;
  for (std::size_t start = 0; start <= text.size() && user.size() < kMaxPolicies;) {
    const std::size_t end = std::min(text.find('\n', start), text.size());
    user.emplace_back(text.substr(start, end - start));
    start = end + 1;
  }
  std::vector<gpu_basics::allocator_options> policies;
  try {
    const auto list = gpu_basics::replay_policies(user);  // the user's come last, each once
    for (std::size_t i = list.size() - user.size(); i < list.size(); ++i)
      policies.push_back(list[i].options);
  } catch (const gpu_basics::logic_error&) {
    return 0;  // the one expected answer to a bad --policy
  }
  for (std::size_t i = 0; i < policies.size(); ++i) {
    gpu_basics::allocator_options o = policies[i];
    const std::string conf = gpu_basics::to_conf_string(o);
    try {
      if (gpu_basics::parse_allocator_options(conf) != o)
        finding(user[i], "'" + conf + "' differs");
    } catch (const gpu_basics::logic_error& e) {
      finding(user[i], "'" + conf + "' does not read back: " + e.what());
    }
    if (o.garbage_collection_threshold > 0) o.reserved_limit = default_peak();
    try {
      (void)gpu_basics::replay_trace(trace(), o);
    } catch (const gpu_basics::out_of_memory&) {
      // a policy's result under a limit, as the replay table shows it
    }
  }
  return 0;
}
