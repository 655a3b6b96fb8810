#include "gpu_basics/core/input_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/interrupt.hpp"
#include "gpu_basics/core/units.hpp"

namespace gpu_basics {

namespace {

/// Closes the descriptor on every path out.
struct fd_owner {
  int fd = -1;
  ~fd_owner() {
    if (fd >= 0) ::close(fd);
  }
};

std::string kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "a special file";
}

[[noreturn]] void too_large(const std::string& path, std::string_view what, std::uint64_t cap) {
  throw format_error(printable(path) + ": larger than " + format_bytes(cap) + ", the limit for a " +
                     std::string(what) + " (GPU_BASICS_MAX_INPUT_MIB raises it)");
}

/// The descriptor of `path` open for reading, once it is known to be a regular file of at most
/// `max_bytes`; `size` receives its size.
int open_input(const std::string& path, std::uint64_t max_bytes, std::string_view what,
               std::uint64_t& size) {
  // O_NONBLOCK: opening a FIFO with no writer returns at once instead of waiting; fstat then
  // refuses it. Regular files ignore the flag.
  fd_owner f{::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC)};
  if (f.fd < 0) {
    const int e = errno;
    if (e == ENOENT) throw format_error(printable(path) + ": cannot be read: no such file");
    if (e == EACCES) throw format_error(printable(path) + ": cannot be read: permission denied");
    if (e == ENXIO)  // a socket
      throw format_error(printable(path) + ": is not a regular file (a socket); give a " +
                         std::string(what));
    throw format_error(printable(path) + ": cannot be read: " + std::strerror(e));
  }
  struct stat st {};
  if (::fstat(f.fd, &st) != 0)
    throw io_error(printable(path) + ": cannot be read: " + std::strerror(errno));
  if (!S_ISREG(st.st_mode))
    throw format_error(printable(path) + ": is not a regular file (" + kind_of(st.st_mode) +
                       "); give a " + std::string(what));
  size = static_cast<std::uint64_t>(st.st_size);
  if (size > max_bytes) too_large(path, what, max_bytes);
  const int fd = f.fd;
  f.fd = -1;
  return fd;
}

}  // namespace

std::uint64_t input_size_cap(std::uint64_t default_bytes) {
  const char* env = std::getenv("GPU_BASICS_MAX_INPUT_MIB");
  if (env == nullptr || *env == '\0') return default_bytes;
  char* end = nullptr;
  errno = 0;
  const unsigned long long mib = std::strtoull(env, &end, 10);
  if (errno != 0 || end == env || *end != '\0' || env[0] == '-' || mib == 0 || mib > (1ull << 40))
    throw format_error("GPU_BASICS_MAX_INPUT_MIB: expected a whole number of MiB above 0, got " +
                       quote_for_message(env));
  return static_cast<std::uint64_t>(mib) << 20;
}

std::string read_input_head(const std::string& path, std::size_t n, std::uint64_t max_bytes,
                            std::string_view what) {
  std::uint64_t size = 0;
  fd_owner f{open_input(path, max_bytes, what, size)};
  std::string out(n, '\0');
  std::size_t got = 0;
  while (got < n) {
    throw_if_interrupted();
    const ssize_t r = ::read(f.fd, out.data() + got, n - got);
    if (r < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      throw io_error(printable(path) + ": cannot be read: " + std::strerror(errno));
    }
    if (r == 0) break;
    got += static_cast<std::size_t>(r);
  }
  out.resize(got);
  return out;
}

std::string read_input_file(const std::string& path, std::uint64_t max_bytes,
                            std::string_view what) {
  std::uint64_t size = 0;
  fd_owner f{open_input(path, max_bytes, what, size)};
  // Read straight into the result, one byte past the size the file says it has, so the end is
  // seen in one read (at least 64 KiB: files in /proc say 0); it grows if the file does.
  std::string out(
      static_cast<std::size_t>(std::max<std::uint64_t>(size + 1, std::uint64_t{64} << 10)), '\0');
  std::size_t got = 0;
  for (;;) {
    throw_if_interrupted();
    if (got == out.size())  // a file that grows while it is read: at most to the cap, then refused
      out.resize(static_cast<std::size_t>(std::min<std::uint64_t>(2 * got, max_bytes + 1)));
    const ssize_t n = ::read(f.fd, out.data() + got, out.size() - got);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      throw io_error(printable(path) + ": cannot be read: " + std::strerror(errno));
    }
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
    if (got > max_bytes) too_large(path, what, max_bytes);
  }
  throw_if_interrupted();
  out.resize(got);
  return out;
}

}  // namespace gpu_basics
