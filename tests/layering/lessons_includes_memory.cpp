// Layering control, MUST compile: a layer above (as lessons are) linking core and memory sees
// both. With the probes that must not compile, it shows the include roots block only the wrong
// way, and that the failures are theirs and not a broken build.
#include "gpu_basics/core/clock.hpp"
#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/memory/caching_allocator.hpp"
#include "gpu_basics/memory/fake_backend.hpp"

namespace gpu_basics::layering_probe {
std::size_t rounded(std::size_t bytes) {
  return round_request(bytes);
}
}  // namespace gpu_basics::layering_probe
