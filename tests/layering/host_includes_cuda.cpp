// Layering probe, MUST NOT compile: a host layer (compiled with GPU_BASICS_HOST_LAYER, as the
// results, report and verdict are) includes one of the library's CUDA headers, which refuses it.
#include "gpu_basics/core/cuda.hpp"
#include "gpu_basics/lessons/lesson.hpp"

namespace gpu_basics::layering_probe {
void touch() {
  (void)cudaGetLastError();
}
}  // namespace gpu_basics::layering_probe
