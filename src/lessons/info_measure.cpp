#include "gpu_basics/lessons/measure.hpp"

namespace gpu_basics::lessons {

info_result measure_info(context& ctx) {
  info_result r;
  r.gpus = ctx.devices;
  r.nvml_status = ctx.nvml_status;
  return r;
}

}  // namespace gpu_basics::lessons
