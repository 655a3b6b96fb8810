#include "gpu_basics/lessons/measure.hpp"

#include <string_view>
#include <utility>

#include <spdlog/spdlog.h>

#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/lessons/registry.hpp"
#include "timed_part.hpp"

namespace gpu_basics::lessons {

namespace {
template <class Result, Result (*Measure)(context&)>
nlohmann::json measured(context& ctx) {
  return nlohmann::json(Measure(ctx));
}
}  // namespace

const std::vector<lesson>& measuring_registry() {
  static const std::vector<lesson> all = [] {
    using step = nlohmann::json (*)(context&);
    const std::pair<std::string_view, step> steps[] = {
        {"info", &measured<info_result, measure_info>},
        {"memory", &measured<memory_result, measure_memory>},
        {"transfer", &measured<transfer_result, measure_transfer>},
        {"profile", &measured<profile_result, measure_profile>},
        {"unified", &measured<unified_result, measure_unified>},
        {"check", &measured<check_result, measure_check>},
    };
    std::vector<lesson> out = registry();
    for (auto& l : out) {
      for (const auto& [name, fn] : steps)
        if (l.name == name) l.measure = fn;
      if (l.measure == nullptr)
        throw logic_error("lesson '" + std::string(l.name) + "' has no measure step");
    }
    return out;
  }();
  return all;
}

void log_part_time(const char* lesson, const char* name, double seconds) {
  spdlog::debug("{}: {} took {:.2f} s", lesson, name, seconds);
}

}  // namespace gpu_basics::lessons
