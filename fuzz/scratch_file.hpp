// What the harnesses that read files share: the input written to a scratch file of this process,
// which the readers then open as the CLI opens a file.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <string>
#include <string_view>

namespace fuzz {

/// "/tmp/gpu_basics_<harness>_fuzz.<pid><suffix>": one per process (and suffix), rewritten for
/// every input.
inline std::string scratch_path(std::string_view harness, std::string_view suffix = "") {
  return "/tmp/gpu_basics_" + std::string(harness) + "_fuzz." + std::to_string(getpid()) +
         std::string(suffix);
}

/// Writes `bytes` to `path`; false when it cannot (the input is then skipped).
inline bool write_file(const std::string& path, std::string_view bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return false;
  const bool written = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  return std::fclose(f) == 0 && written;
}

}  // namespace fuzz
