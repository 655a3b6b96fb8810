#include "gpu_basics/core/logging.hpp"

#include <cstdio>
#include <iostream>
#include <memory>
#include <mutex>

#include <spdlog/sinks/sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

namespace gpu_basics {

void flush_stdout() noexcept {
  try {
    std::cout.flush();
  } catch (...) {  // a stream set to throw: the line on stderr matters more
  }
  std::fflush(stdout);
}

namespace {

/// The stderr sink, with stdout flushed before each line (Note [stdout before stderr]).
class stdout_first_sink final : public spdlog::sinks::sink {
 public:
  stdout_first_sink() : stderr_(std::make_shared<spdlog::sinks::stderr_color_sink_mt>()) {}

  void log(const spdlog::details::log_msg& msg) override {
    // One lock around both, so that no other log line comes between the flush and this line.
    const std::lock_guard<std::mutex> lock(mutex_);
    flush_stdout();
    stderr_->log(msg);
  }
  void flush() override { stderr_->flush(); }
  void set_pattern(const std::string& pattern) override { stderr_->set_pattern(pattern); }
  void set_formatter(std::unique_ptr<spdlog::formatter> f) override {
    stderr_->set_formatter(std::move(f));
  }

 private:
  std::mutex mutex_;
  std::shared_ptr<spdlog::sinks::stderr_color_sink_mt> stderr_;
};

}  // namespace

void setup_logging(log_level level) {
  static const auto logger = [] {
    auto l = std::make_shared<spdlog::logger>("gpu_basics", std::make_shared<stdout_first_sink>());
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
