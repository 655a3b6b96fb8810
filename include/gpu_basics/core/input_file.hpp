// Reading an input file (a results file, a snapshot) the same way for every command: regular
// files only, refused at once otherwise (a FIFO with no writer would block, /dev/zero never ends);
// a size cap checked before reading and again while reading; Ctrl-C / SIGTERM honoured between
// chunks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace gpu_basics {

/// Default size caps (bytes). GPU_BASICS_MAX_INPUT_MIB (a whole number of MiB, > 0) replaces
/// either for one run.
inline constexpr std::uint64_t kMaxResultsFileBytes = 512ull << 20;  // a results JSON
inline constexpr std::uint64_t kMaxSnapshotFileBytes = 16ull << 30;  // a PyTorch snapshot pickle
/// A saved advice or replay (advise's files are a few hundred KiB; this leaves room for hundreds
/// of --fit limits and policies). Lower than a results file's cap: reading one, then drawing it,
/// takes some 30 times its size in memory.
inline constexpr std::uint64_t kMaxSnapshotJsonBytes = 32ull << 20;

/// The cap to apply: `default_bytes`, or GPU_BASICS_MAX_INPUT_MIB where it is set.
/// @throws format_error when GPU_BASICS_MAX_INPUT_MIB is not a whole number of MiB above 0.
[[nodiscard]] std::uint64_t input_size_cap(std::uint64_t default_bytes);

/// The whole file at `path`; `what` names it in messages ("results file", "snapshot").
/// @throws format_error when it cannot be opened, is not a regular file, or is larger than
/// `max_bytes` (one line naming the path, printable: bad input, exit 2); io_error when reading
/// fails midway; interrupted on Ctrl-C / SIGTERM.
[[nodiscard]] std::string read_input_file(const std::string& path, std::uint64_t max_bytes,
                                          std::string_view what);

/// A regular file read a chunk at a time (a snapshot of a GB need not be held whole), with the
/// checks of read_input_file(): refused on opening when it is not a regular file or is larger
/// than the cap, and again should it grow past the cap while being read.
class input_reader {
 public:
  /// @throws as read_input_file() for a file that cannot be opened or is too large.
  input_reader(const std::string& path, std::uint64_t max_bytes, std::string_view what);
  ~input_reader();
  input_reader(const input_reader&) = delete;
  input_reader& operator=(const input_reader&) = delete;

  /// Up to `n` bytes into `out`: how many, 0 at the end.
  /// @throws format_error past the cap; io_error when reading fails; interrupted on Ctrl-C /
  /// SIGTERM.
  std::size_t read(char* out, std::size_t n);
  /// Back to the first byte.
  /// @throws io_error when the file cannot be read from its start again.
  void rewind();
  /// The file's size when it was opened.
  [[nodiscard]] std::uint64_t size() const noexcept { return size_; }

 private:
  std::string path_;
  std::string what_;
  std::uint64_t max_bytes_ = 0;
  std::uint64_t size_ = 0;
  std::uint64_t read_ = 0;  // bytes read since the start
  int fd_ = -1;
};

/// The first `n` bytes of the file at `path` (fewer when it is shorter), after the same checks as
/// read_input_file(): a reader looks at them to refuse a file that is not of its format before
/// reading the whole of it.
/// @throws as read_input_file().
[[nodiscard]] std::string read_input_head(const std::string& path, std::size_t n,
                                          std::uint64_t max_bytes, std::string_view what);

}  // namespace gpu_basics
