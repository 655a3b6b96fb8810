#include "gpu_basics/lessons/registry.hpp"

#include "gpu_basics/lessons/check.hpp"
#include "gpu_basics/lessons/info.hpp"
#include "gpu_basics/lessons/memory.hpp"
#include "gpu_basics/lessons/profile.hpp"
#include "gpu_basics/lessons/transfer.hpp"
#include "gpu_basics/lessons/unified.hpp"
#include "gpu_basics/memory/caching_allocator.hpp"

namespace gpu_basics::lessons {

const std::vector<lesson>& registry() {
  register_allocator_keys();  // the memory lesson's memory.allocator.conf holds them
  static const std::vector<lesson> all = {info_lesson(),    memory_lesson(),  transfer_lesson(),
                                          profile_lesson(), unified_lesson(), check_lesson()};
  return all;
}

const lesson* find_lesson(std::string_view name) {
  for (const auto& l : registry())
    if (l.name == name) return &l;
  return nullptr;
}

}  // namespace gpu_basics::lessons
