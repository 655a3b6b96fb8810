// Typed errors of gpu-basics. Every failure the library reports is one of these; the library
// never exits the process. Host-only: no CUDA header is needed to catch or construct them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace gpu_basics {

/// Base of every gpu-basics error.
class error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A precondition on the caller's input failed (bad size, bad argument).
class logic_error : public error {
 public:
  using error::error;
};

/// Bad configuration: names the source (file or --set), line, column and key.
class config_error : public error {
 public:
  config_error(std::string source, int line, int column, std::string key, std::string message);

  [[nodiscard]] const std::string& source() const noexcept { return source_; }
  [[nodiscard]] int line() const noexcept { return line_; }
  [[nodiscard]] int column() const noexcept { return column_; }
  [[nodiscard]] const std::string& key() const noexcept { return key_; }
  [[nodiscard]] const std::string& detail() const noexcept { return detail_; }

 private:
  std::string source_;
  int line_;
  int column_;
  std::string key_;
  std::string detail_;
};

/// A CUDA runtime/driver/library call failed. Carries the call's text, where it was made, and the
/// error's numeric code and name.
class cuda_error : public error {
 public:
  cuda_error(int code, std::string name, const std::string& description, const std::string& call,
             const char* file, int line);
  [[nodiscard]] int code() const noexcept { return code_; }
  [[nodiscard]] const std::string& name() const noexcept { return name_; }

 private:
  int code_;
  std::string name_;
};

/// No usable GPU: no driver, no device, or a device index that does not exist.
class no_device_error : public error {
 public:
  using error::error;
};

/// A device or pinned-host allocation could not be satisfied.
class out_of_memory : public error {
 public:
  out_of_memory(const std::string& message, std::size_t requested_bytes)
      : error(message), requested_bytes_(requested_bytes) {}
  [[nodiscard]] std::size_t requested_bytes() const noexcept { return requested_bytes_; }

 private:
  std::size_t requested_bytes_;
};

/// Data read back from the GPU did not match what was written: the measurement is invalid.
class verification_error : public error {
 public:
  using error::error;
};

/// An I/O failure writing results (JSON, CSV, traces) or reading inputs.
class io_error : public error {
 public:
  using error::error;
};

}  // namespace gpu_basics

/// Throws gpu_basics::logic_error naming the condition and where it failed.
#define GPU_BASICS_EXPECTS(cond, msg)                                                   \
  do {                                                                                  \
    if (!(cond)) {                                                                      \
      throw ::gpu_basics::logic_error(std::string(msg) + " (" #cond ", " __FILE__ ":" + \
                                      std::to_string(__LINE__) + ")");                  \
    }                                                                                   \
  } while (0)
