// Layering probe, must NOT compile: memory and transfer are siblings, neither includes the other.
// memory's own header and core's are found; transfer's is not.
#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/memory/backend.hpp"

// The wrong way:
#include "gpu_basics/transfer/plan.hpp"
