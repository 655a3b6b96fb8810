// gpu-basics: the CLI. Parsing and running live in cli.cpp / run.cpp so they are testable.
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "cli.hpp"
#include "exit_codes.hpp"
#include "gpu_basics/core/interrupt.hpp"
#include "run.hpp"

int main(int argc, char** argv) {
  // Load every kernel at context creation. With lazy loading (CUDA 12.2+ default) the first
  // launch of a kernel can wait for the device to go idle, which never happens while a blocking
  // kernel holds a stream for a measurement. A user's own setting wins.
  setenv("CUDA_MODULE_LOADING", "EAGER", 0);
  // Ctrl-C or SIGTERM stops the run at the next safe point (exit 130 / 143); a second one ends
  // the process at once.
  gpu_basics::install_interrupt_handlers();
  try {
    std::vector<std::string> args(argv, argv + argc);
    // The unified lesson's ledger runs this executable as a fresh child: not a command of --help.
    if (args.size() > 1 && args[1] == "ledger-probe")
      return gpu_basics::cli::run_ledger_probe(args, std::cout, std::cerr);
    const auto parsed = gpu_basics::cli::parse(args, std::cout, std::cerr);
    if (!parsed.opts) return parsed.exit_code;
    return gpu_basics::cli::run(*parsed.opts, std::cout, std::cerr);
  } catch (...) {  // run() catches everything; this is for parsing, so nothing can abort
    std::cerr << "gpu-basics: internal error while reading the command line\n";
    return gpu_basics::cli::exit_internal;
  }
}
