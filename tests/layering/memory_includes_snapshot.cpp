// Layering probe, must NOT compile: snapshot analysis is a floor above memory; the allocator
// runtime does not see it. memory's own header and core's are found; snapshot's is not.
#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/memory/caching_allocator.hpp"

// The wrong way:
#include "gpu_basics/snapshot/replay.hpp"
