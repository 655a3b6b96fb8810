// The one list of lessons: the CLI's help, `all`, dispatch and `show` all read it.
#pragma once

#include <string_view>
#include <vector>

#include "gpu_basics/lessons/lesson.hpp"

namespace gpu_basics::lessons {

/// Every lesson, in the order `all` runs them (info first); `check` last, outside `all`.
[[nodiscard]] const std::vector<lesson>& registry();

/// The lesson called `name`, or nullptr.
[[nodiscard]] const lesson* find_lesson(std::string_view name);

}  // namespace gpu_basics::lessons
