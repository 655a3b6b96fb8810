#include "gpu_basics/core/logging.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

namespace gpu_basics {

void setup_logging(log_level level) {
  static const auto logger = [] {
    auto l = spdlog::stderr_color_mt("gpu_basics");
    l->set_pattern("[%^%l%$] %v");
    spdlog::set_default_logger(l);
    return l;
  }();
  spdlog::level::level_enum lv = spdlog::level::info;
  switch (level) {
    case log_level::trace:
      lv = spdlog::level::trace;
      break;
    case log_level::debug:
      lv = spdlog::level::debug;
      break;
    case log_level::info:
      lv = spdlog::level::info;
      break;
    case log_level::warn:
      lv = spdlog::level::warn;
      break;
    case log_level::error:
      lv = spdlog::level::err;
      break;
  }
  logger->set_level(lv);
}

}  // namespace gpu_basics
