#include "gpu_basics/core/shared_gpu.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "gpu_basics/core/units.hpp"

namespace gpu_basics {

gpu_neighbours neighbours_of(const std::vector<nvml_process>& listed, unsigned self_pid) {
  gpu_neighbours n;
  n.known = true;
  const bool self_listed = std::any_of(listed.begin(), listed.end(),
                                       [&](const nvml_process& p) { return p.pid == self_pid; });
  bool skipped_one = false;
  for (const nvml_process& p : listed) {
    if (self_listed ? p.pid == self_pid : !skipped_one) {
      skipped_one = true;
      continue;
    }
    n.pids.push_back(p.pid);
    n.used_bytes += p.used_bytes.value_or(0);
  }
  return n;
}

namespace {

std::string others_text(const gpu_neighbours& n) {
  std::string pids;
  for (std::size_t i = 0; i < n.pids.size() && i < 4; ++i)
    pids += fmt::format("{}{}", i ? ", " : "", n.pids[i]);
  if (n.pids.size() > 4) pids += ", ...";
  return fmt::format("{} other process{} use{} this GPU (PID {}{})", n.pids.size(),
                     n.pids.size() == 1 ? "" : "es", n.pids.size() == 1 ? "s" : "", pids,
                     n.used_bytes ? fmt::format("; {} held", format_bytes(n.used_bytes)) : "");
}

}  // namespace

memory_step plan_memory_step(std::string step, std::uint64_t wanted, std::uint64_t free,
                             const gpu_neighbours& others, const config::shared_gpu_section& c,
                             bool shrinkable, std::uint64_t min_bytes) {
  memory_step m;
  m.step = std::move(step);
  m.wanted_bytes = wanted;
  m.used_bytes = wanted;
  if (!others.any() || c.force) return m;
  const auto share =
      static_cast<std::uint64_t>(c.free_share * static_cast<double>(free)) / kMiB * kMiB;
  if (wanted <= share) return m;
  const std::string why =
      fmt::format("{}, and shared_gpu.free_share lets a step take {:.0f}% of the {} free ({})",
                  others_text(others), 100 * c.free_share, format_bytes(free), format_bytes(share));
  if (shrinkable && share >= std::max<std::uint64_t>(min_bytes, 1)) {
    m.action = "shrank";
    m.used_bytes = share;
    m.line = fmt::format("{}: {} instead of {}: {}; set shared_gpu.force: true to take {}.", m.step,
                         format_bytes(share), format_bytes(wanted), why, format_bytes(wanted));
  } else {
    m.action = "skipped";
    m.used_bytes = 0;
    m.line = fmt::format("{} skipped: it would hold {}: {}; set shared_gpu.force: true to run it.",
                         m.step, format_bytes(wanted), why);
  }
  return m;
}

}  // namespace gpu_basics
