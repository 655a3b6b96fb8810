// Exit codes of the gpu-basics CLI (documented in the README and docs/cli.md).
#pragma once

namespace gpu_basics::cli {

enum exit_code : int {
  exit_ok = 0,
  exit_internal = 1,       // unexpected failure (a bug: please report it)
  exit_usage = 2,          // bad command line, configuration, or results file
  exit_no_gpu = 3,         // no driver, no visible GPU, or no such device index
  exit_cuda = 4,           // a CUDA call failed while running
  exit_verification = 5,   // data read back did not match what was written
  exit_out_of_memory = 6,  // a size does not fit in device or host memory
  exit_io = 7,             // results could not be written
  exit_nccl = 8,           // an NCCL call failed (collectives between GPUs)
  exit_check_failed = 9,   // check: a check FAILed (or WARNed, with --strict)
  exit_worse = 10,         // compare: a gate is worse; compare --fleet: a node is degraded
  exit_interrupted = 130,  // stopped by SIGINT (Ctrl-C): 128 + the signal's number, as shells do
  exit_terminated = 143,   // stopped by SIGTERM
};

}  // namespace gpu_basics::cli
