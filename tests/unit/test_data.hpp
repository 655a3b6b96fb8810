// The committed fixtures (tests/data/) and reading a file whole: shared by the tests that read
// them.
#pragma once

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace gpu_basics::testing {

/// tests/data/ of the source tree, with its trailing slash.
inline const std::string kData = std::string(GPU_BASICS_SOURCE_DIR) + "/tests/data/";

/// The whole file, its bytes as they are ("" when it cannot be read).
inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace gpu_basics::testing
