// Layering probe, MUST NOT compile: a host layer includes CUDA's runtime header. Host layers link
// no CUDA target, so CUDA's include directory is out of their sight (in a host-only build there
// is no CUDA at all).
#include <cuda_runtime_api.h>

#include "gpu_basics/lessons/lesson.hpp"

namespace gpu_basics::layering_probe {
int devices() {
  int n = 0;
  (void)cudaGetDeviceCount(&n);
  return n;
}
}  // namespace gpu_basics::layering_probe
