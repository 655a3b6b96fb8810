#include "gpu_basics/core/errors.hpp"

#include <utility>

#include <fmt/format.h>

namespace gpu_basics {

namespace {
std::string format_config_message(const std::string& source, int line, int column,
                                  const std::string& key, const std::string& message) {
  std::string where = source;
  if (line > 0)
    where += column > 0 ? fmt::format(":{}:{}", line, column) : fmt::format(":{}", line);
  return key.empty() ? fmt::format("{}: {}", where, message)
                     : fmt::format("{}: {}: {}", where, key, message);
}
}  // namespace

config_error::config_error(std::string source, int line, int column, std::string key,
                           std::string message)
    : error(format_config_message(source, line, column, key, message)),
      source_(std::move(source)),
      line_(line),
      column_(column),
      key_(std::move(key)),
      detail_(std::move(message)) {}

cuda_error::cuda_error(int code, std::string name, const std::string& description,
                       const std::string& call, const char* file, int line)
    : error(fmt::format("{} failed: {} ({}): {} at {}:{}", call, name, code, description, file,
                        line)),
      code_(code),
      name_(std::move(name)) {}

nccl_error::nccl_error(int code, const std::string& description, const std::string& call,
                       const char* file, int line)
    : error(fmt::format("{} failed: NCCL error {} ({}) at {}:{}", call, code, description, file,
                        line)),
      code_(code) {}

}  // namespace gpu_basics
