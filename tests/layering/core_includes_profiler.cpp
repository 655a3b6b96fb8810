// Layering probe, must NOT compile: core is the bottom layer and sees no other module's headers.
// The first include is core's own (found); the second names a real profiler header, which is not
// there for core: "No such file or directory". Built only by the test (ctest -R layering).
#include "gpu_basics/core/errors.hpp"

// The wrong way:
#include "gpu_basics/profiler/trace_writer.hpp"
