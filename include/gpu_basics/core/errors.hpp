// Typed errors of gpu-basics. Every failure the library reports is one of these; the library
// never exits the process. Host-only: no CUDA header is needed to catch or construct them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>
#include <stdexcept>
#include <string>
#include <string_view>

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
  /// what() reads "source:line:column: key: message"; a line or column of 0 and an empty key
  /// are left out.
  config_error(std::string source, int line, int column, std::string key, std::string message);

  /// The parts as given: where the value came from, the key, and detail() the message alone.
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
  /// what() names the call, the error's name, code and description, and file:line.
  cuda_error(int code, std::string name, const std::string& description, const std::string& call,
             const char* file, int line);
  /// The status code (cudaError_t, or cublasStatus_t for cuBLASLt calls).
  [[nodiscard]] int code() const noexcept { return code_; }
  /// The status's name ("cudaErrorInvalidValue").
  [[nodiscard]] const std::string& name() const noexcept { return name_; }

 private:
  int code_;
  std::string name_;
};

/// An NCCL call failed (communicator set-up, a collective, a group). Carries NCCL's result code
/// (ncclResult_t: 1 unhandled CUDA error, 2 system error, 3 internal error, 4 invalid argument,
/// 5 invalid usage, 6 remote error, 7 in progress), the call and where it was made. NCCL's own
/// failures are not CUDA errors: they get their own type, and their own exit code in the CLI.
class nccl_error : public error {
 public:
  /// what() names the call, NCCL's code and description, and file:line.
  nccl_error(int code, const std::string& description, const std::string& call, const char* file,
             int line);
  /// NCCL's result code (ncclResult_t).
  [[nodiscard]] int code() const noexcept { return code_; }

 private:
  int code_;
};

/// No usable GPU: no driver, no device, or a device index that does not exist.
class no_device_error : public error {
 public:
  using error::error;
};

/// A device or pinned-host allocation could not be satisfied. A std::bad_alloc (as rmm's
/// out_of_memory is), so code written for any allocator sees it, and `catch (const
/// std::exception&)` still does. It is the one error that is not a gpu_basics::error: deriving
/// from both would give it two std::exception bases, and a catch of std::exception would miss it.
class out_of_memory : public std::bad_alloc {
 public:
  /// `message` is what what() returns; `requested_bytes` the size of the failed request.
  out_of_memory(std::string message, std::size_t requested_bytes)
      : message_(std::move(message)), requested_bytes_(requested_bytes) {}
  /// The message given at construction.
  [[nodiscard]] const char* what() const noexcept override { return message_.c_str(); }
  /// The size of the request that failed (0 where the thrower did not know it).
  [[nodiscard]] std::size_t requested_bytes() const noexcept { return requested_bytes_; }

 private:
  std::string message_;
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

/// A run stopped by a signal (SIGINT from Ctrl-C, SIGTERM): thrown where the work checks for an
/// interruption (core/interrupt.hpp), so everything on the way out is released by its destructor.
class interrupted : public error {
 public:
  /// `signal_number` is the signal that arrived (SIGINT, SIGTERM).
  explicit interrupted(int signal_number);
  /// The signal that arrived.
  [[nodiscard]] int signal_number() const noexcept { return signal_number_; }

 private:
  int signal_number_;
};

/// A file that is not what it should be: a results file that is not JSON, is not gpu-basics
/// output, or has a schema version or a lesson this build does not know.
class format_error : public error {
 public:
  using error::error;
};

/// A value of a JSON document that is not what its reader expects (a wrong kind, out of range,
/// missing), at a key path of the document: what() reads "shapes[0].copies[3].seconds: expected a
/// number, got null". Each level of a reader puts its key or index in front as the error leaves it,
/// so the outermost one, which knows where its document sits in a file, completes the path.
class json_path_error : public format_error {
 public:
  /// An error at the top of the document read (an empty path): `detail` says what is wrong.
  explicit json_path_error(std::string detail);

  /// "path: detail", or the detail alone while the path is empty.
  [[nodiscard]] const char* what() const noexcept override { return what_.c_str(); }
  /// The key path: "shapes[0].copies[3].seconds", "" for the top.
  [[nodiscard]] const std::string& path() const noexcept { return path_; }
  /// What is wrong there: "expected a number, got null".
  [[nodiscard]] const std::string& detail() const noexcept { return detail_; }

  /// Puts the member `key` in front of the path (at most 64 characters of it, escaped).
  void prepend_key(std::string_view key);
  /// Puts "[index]" in front of the path.
  void prepend_index(std::size_t index);
  /// Puts `path` (a key path of this error's form, "" for none) in front of the path.
  void prepend_path(std::string_view path);

  /// `key` as a path shows it: escaped, at most 64 characters of it, "\"\"" when empty.
  [[nodiscard]] static std::string key_text(std::string_view key);

 private:
  void update();
  std::string path_;
  std::string detail_;
  std::string what_;
};

/// `text` as it may appear in a one-line message: in double quotes, cut to `max_chars` characters
/// (the rest is counted, not shown), with quotes, backslashes, control characters and bytes that
/// are not UTF-8 escaped (\n, \t, \x1b, \"), so no input can break the line or drive a terminal.
[[nodiscard]] std::string quote_for_message(std::string_view text, std::size_t max_chars = 48);

/// `text` escaped like quote_for_message() but neither quoted nor cut: for paths and keys in
/// messages.
[[nodiscard]] std::string printable(std::string_view text);

/// The longest message line, in characters: longer ones are cut by message_line().
inline constexpr std::size_t kMaxMessageChars = 1024;

/// `text` as one line a terminal can show: control characters and bytes that are not UTF-8
/// escaped (\n, \x1b), quotes and backslashes left as they are (so text that is already escaped
/// is not escaped twice), cut to `max_chars` characters with the cut marked "... (N more
/// characters)". Every error line the CLI writes goes through it.
[[nodiscard]] std::string message_line(std::string_view text,
                                       std::size_t max_chars = kMaxMessageChars);

/// `text` as a terminal may show it: like message_line() but newlines kept and nothing cut. For
/// tables and notes rendered from a results file.
[[nodiscard]] std::string terminal_text(std::string_view text);

}  // namespace gpu_basics

/// Throws gpu_basics::logic_error naming the condition and where it failed.
#define GPU_BASICS_EXPECTS(cond, msg)                                                   \
  do {                                                                                  \
    if (!(cond)) {                                                                      \
      throw ::gpu_basics::logic_error(std::string(msg) + " (" #cond ", " __FILE__ ":" + \
                                      std::to_string(__LINE__) + ")");                  \
    }                                                                                   \
  } while (0)
