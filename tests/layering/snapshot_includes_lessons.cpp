// Layering probe, must NOT compile: snapshot analysis sits below the lessons; it sees memory and
// core, not the lessons above it.
#include "gpu_basics/memory/caching_allocator.hpp"
#include "gpu_basics/snapshot/replay.hpp"

// The wrong way:
#include "gpu_basics/lessons/lesson.hpp"
