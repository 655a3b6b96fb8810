// `gpu-basics replay SNAPSHOT.pickle`: prints the policy sweep of a PyTorch memory snapshot
// (gpu_basics/memory/policy_sweep.hpp) and writes it as JSON. No GPU.
#pragma once

#include <iosfwd>

#include "cli.hpp"
#include "gpu_basics/memory/policy_sweep.hpp"

namespace gpu_basics::cli {

/// `replay`: reads, replays, prints, writes --json. Returns the exit code; never throws.
int run_replay(const options& o, std::ostream& out, std::ostream& err);

}  // namespace gpu_basics::cli
