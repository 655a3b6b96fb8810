// gpu-basics: the CLI. Parsing and running live in cli.cpp / run.cpp so they are testable.
#include <iostream>
#include <string>
#include <vector>

#include "cli.hpp"
#include "run.hpp"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  const auto parsed = gpu_basics::cli::parse(args, std::cout, std::cerr);
  if (!parsed.opts) return parsed.exit_code;
  return gpu_basics::cli::run(*parsed.opts, std::cout, std::cerr);
}
