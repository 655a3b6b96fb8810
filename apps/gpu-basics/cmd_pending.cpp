// Lessons whose measurements are not part of this build yet. They still load and validate the
// configuration and find the GPU (run.cpp), then say plainly that there is nothing to measure.
#include "gpu_basics/core/errors.hpp"
#include "lesson.hpp"

namespace gpu_basics::cli {

report run_memory(context&) { throw error("the memory lesson is not part of this build yet"); }
report run_transfer(context&) { throw error("the transfer lesson is not part of this build yet"); }
report run_profile(context&) { throw error("the profile lesson is not part of this build yet"); }

}  // namespace gpu_basics::cli
