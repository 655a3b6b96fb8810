// Advice from a snapshot's pickle bytes in memory, as `gpu-basics advise` gives it for a file:
// what a job asks for at the moment it runs out of memory (gpu_basics_torch_advise(), the C ABI of
// the torch allocator library, and gpu_basics.torch.watch() behind it). The snapshot taken then
// ends in PyTorch's oom entry for the request that failed; replay_failed_request() makes it the
// trace's last allocation, so that each policy is asked whether it would have served it too.
#include <algorithm>
#include <future>
#include <string>
#include <system_error>
#include <thread>

#include <fmt/format.h>

#include "advise_frames.hpp"
#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/snapshot/advise.hpp"

namespace gpu_basics {

std::optional<std::size_t> replay_failed_request(torch_snapshot& s, int device) {
  if (device < 0 || static_cast<std::size_t>(device) >= s.device_traces.size()) return {};
  auto& trace = s.device_traces[static_cast<std::size_t>(device)];
  // From the end: segment events (the cache freed before PyTorch gave up) may follow the oom
  // entry; an alloc or free after it means the job went on, and the trace no longer ends there.
  auto it = trace.rbegin();
  for (; it != trace.rend(); ++it) {
    if (it->action == torch_action::oom) break;
    if (it->action == torch_action::alloc || it->action == torch_action::free_requested ||
        it->action == torch_action::free_completed)
      return {};
  }
  if (it == trace.rend() || it->size == 0) return {};
  // A trace of nothing but the failed request has nothing to advise on (refused as any trace
  // with no allocation to replay).
  if (std::none_of(trace.begin(), trace.end(),
                   [](const auto& e) { return e.action == torch_action::alloc; }))
    return {};
  // An address no block of the snapshot has: above every one the trace and the segments name.
  std::uint64_t top = 0;
  for (const auto& e : trace)
    if (e.action != torch_action::oom) top = std::max(top, e.addr + e.size);
  for (const auto& seg : s.segments) top = std::max(top, seg.address + seg.total_size);
  it->action = torch_action::alloc;
  it->addr = top + 512;
  return static_cast<std::size_t>(it->size);
}

bytes_advice advise_from_bytes(std::string_view bytes, const advise_request& r) {
  // The frames are read beside the first read, which keeps one core busy (advise_snapshot()
  // then keeps them all): before advice names its requests, so every alloc's are kept.
  std::future<alloc_frames_read> ahead;
  if (r.threads != 1 && std::thread::hardware_concurrency() > 1) {
    try {
      ahead =
          std::async(std::launch::async, [bytes, &r] { return read_all_frames(bytes, r.name); });
    } catch (const std::system_error&) {  // no thread: read after the advice
    }
  }
  torch_snapshot s = parse_torch_snapshot(bytes, r.name);
  const int device = r.device.value_or(s.busiest_device());
  if (device < 0 || static_cast<std::size_t>(device) >= s.device_traces.size() ||
      s.device_traces[static_cast<std::size_t>(device)].empty())
    throw logic_error(fmt::format("{}: no trace of device {} in the snapshot", r.name, device));
  bytes_advice out;
  if (r.failed_request) out.failed_request = replay_failed_request(s, device);
  const auto policies = advise_policies({}, !r.fit_limits.empty(), r.device_memory);
  out.a = advise_snapshot(s, r.name, device, policies, r.fit_limits, r.threads, r.device_memory);
  out.a.failed_request = out.failed_request;
  const bool failed = out.failed_request.has_value();
  try {  // where in the user's code, as advise reads it from a file
    if (ahead.valid())
      (void)attach_frames_with(
          out.a, s, r.name, failed,
          [&](int d, const std::set<std::size_t>& wanted) { return ahead.get()(d, wanted); });
    else
      (void)attach_frames_from_bytes(out.a, s, bytes, r.name, failed);
  } catch (const error&) {  // the advice stands without them
  }
  return out;
}

}  // namespace gpu_basics
