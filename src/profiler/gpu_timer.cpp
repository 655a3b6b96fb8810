#include "gpu_basics/profiler/gpu_timer.hpp"

#include <spdlog/spdlog.h>

#include "gpu_basics/core/clock.hpp"

namespace gpu_basics {

gpu_timing::scope::scope(gpu_timing& owner, std::string name, stream_view s)
    : owner_(owner), name_(std::move(name)), stream_(s), host_start_(host_seconds()) {
  start_.record(stream_);
}

gpu_timing::scope::~scope() {
  try {
    stop_.record(stream_);
    owner_.pending_.push_back(
        {std::move(name_), std::move(start_), std::move(stop_), host_seconds() - host_start_});
  } catch (const std::exception& e) {
    spdlog::warn("timing region dropped: {}", e.what());
  }
}

void gpu_timing::flush() {
  for (auto& p : pending_) {
    p.stop.synchronize();
    registry_.record(p.name, cuda_event::elapsed_s(p.start, p.stop), p.host_s);
  }
  pending_.clear();
}

void gpu_timing::flush_nothrow() noexcept {
  try {
    flush();
  } catch (const std::exception& e) {
    spdlog::warn("timing regions dropped at shutdown: {}", e.what());
  }
}

}  // namespace gpu_basics
