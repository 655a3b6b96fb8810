// The printed conf checked by the PyTorch that will read it: `advise --torch-python PY` runs
// PY in a child process and has PyTorch's own parser read the conf (no GPU is touched), so a key
// or value that PyTorch does not accept is never printed.
#pragma once

#include <string>

namespace gpu_basics::cli {

/// `conf` as the running PyTorch reads it: with a fraction the shell computes
/// ("per_process_memory_fraction:$(python ...)"), a stand-in fraction is read instead.
/// @throws format_error naming `python` and the conf, with PyTorch's own message, when the child
/// cannot run or PyTorch refuses the conf.
void check_with_torch(const std::string& python, const std::string& conf);

}  // namespace gpu_basics::cli
