// The schema-1 readers, one per lesson (src/lessons/v1/<lesson>_v1.cpp): each rebuilds a lesson's
// result from a schema-1 block (its tables with rendered titles, notes and extra) and is what the
// lesson's registry entry calls as upgrade_v1. The public lesson headers declare the same
// functions for the tests. Private to the lessons module; host-only.
#pragma once

#include <optional>

#include <nlohmann/json.hpp>

#include "common.hpp"
#include "gpu_basics/lessons/double_buffer.hpp"
#include "gpu_basics/lessons/info.hpp"
#include "gpu_basics/lessons/memory.hpp"
#include "gpu_basics/lessons/multi_gpu.hpp"
#include "gpu_basics/lessons/profile.hpp"
#include "gpu_basics/lessons/transfer.hpp"

namespace gpu_basics::lessons {

[[nodiscard]] info_result info_from_v1(const nlohmann::json& block);
[[nodiscard]] memory_result memory_from_v1(const nlohmann::json& block);
[[nodiscard]] transfer_result transfer_from_v1(const nlohmann::json& block);
[[nodiscard]] std::optional<double_buffer_result> double_buffer_from_v1(
    const nlohmann::json& block);
[[nodiscard]] std::optional<multi_gpu_result> multi_gpu_from_v1(const nlohmann::json& block);
[[nodiscard]] profile_result profile_from_v1(const nlohmann::json& block);

// The same over a block whose values know their key paths: what the readers call one another
// with. Each throws json_path_error naming the path of what cannot be read.
[[nodiscard]] transfer_result transfer_from_v1(const v1::node& block);
[[nodiscard]] std::optional<double_buffer_result> double_buffer_from_v1(const v1::node& block);
[[nodiscard]] std::optional<multi_gpu_result> multi_gpu_from_v1(const v1::node& block);

}  // namespace gpu_basics::lessons
