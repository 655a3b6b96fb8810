// `gpu-basics info`: what each visible GPU is, and what its figures mean for the lessons.
#pragma once

#include <string>
#include <vector>

#include "gpu_basics/core/json.hpp"
#include "gpu_basics/lessons/lesson.hpp"

namespace gpu_basics::lessons {

struct info_result {
  std::vector<device_info> gpus;
  std::string nvml_status = "ok";

  bool operator==(const info_result&) const = default;
};
GPU_BASICS_JSON(info_result, gpus, nvml_status)

/// Copy engines, link ceiling, link state, HBM against the link.
[[nodiscard]] std::vector<note> explain_info(const info_result& r, const device_facts& facts);
/// One table per GPU: "gpu<index>".
[[nodiscard]] std::vector<presentation::table> present_info(const info_result& r);
/// From a schema-1 block: the GPUs were kept under extra.gpus.
/// @throws json_path_error naming the key path in the block of what cannot be read.
[[nodiscard]] info_result info_from_v1(const nlohmann::json& block);

/// The registry's entry.
[[nodiscard]] lesson info_lesson();

}  // namespace gpu_basics::lessons
