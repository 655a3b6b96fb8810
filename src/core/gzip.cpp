#include "gpu_basics/core/gzip.hpp"

#include <fmt/format.h>

#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/interrupt.hpp"

#if GPU_BASICS_HAVE_ZLIB
#include <zlib.h>
#endif

namespace gpu_basics {

bool is_gzip(std::string_view bytes) noexcept {
  return bytes.size() >= 3 && static_cast<unsigned char>(bytes[0]) == 0x1f &&
         static_cast<unsigned char>(bytes[1]) == 0x8b && static_cast<unsigned char>(bytes[2]) == 8;
}

std::string gunzip(std::string_view bytes, std::uint64_t max_bytes, std::string_view name,
                   const std::function<void(std::string_view)>& check_head) {
  constexpr std::size_t kHead = 64;
  bool head_checked = !check_head;
#if GPU_BASICS_HAVE_ZLIB
  z_stream z{};
  // windowBits 15 + 32: a gzip (or zlib) header, detected.
  if (inflateInit2(&z, 15 + 32) != Z_OK)
    throw format_error(fmt::format("{}: gzip: zlib would not start", printable(name)));
  struct ender {
    z_stream* z;
    ~ender() { inflateEnd(z); }
  } end{&z};
  std::string out;
  const auto* in = reinterpret_cast<const unsigned char*>(bytes.data());
  std::size_t consumed = 0;
  constexpr std::size_t kChunk = std::size_t{1} << 20;
  for (;;) {
    throw_if_interrupted();
    if (z.avail_in == 0 && consumed < bytes.size()) {
      const std::size_t n = std::min<std::size_t>(bytes.size() - consumed, 1u << 30);
      z.next_in = const_cast<unsigned char*>(in + consumed);
      z.avail_in = static_cast<uInt>(n);
      consumed += n;
    }
    const std::size_t before = out.size();
    out.resize(before + kChunk);
    z.next_out = reinterpret_cast<unsigned char*>(out.data() + before);
    z.avail_out = static_cast<uInt>(kChunk);
    const int rc = inflate(&z, Z_NO_FLUSH);
    out.resize(before + kChunk - z.avail_out);
    if (!head_checked && (out.size() >= kHead || rc == Z_STREAM_END)) {
      head_checked = true;
      check_head(std::string_view(out).substr(0, kHead));
    }
    if (out.size() > max_bytes)
      throw format_error(
          fmt::format("{}: decompresses to more than {} MiB, the limit for this input (set "
                      "GPU_BASICS_MAX_INPUT_MIB to raise it)",
                      printable(name), max_bytes >> 20));
    if (rc == Z_STREAM_END) {
      // Another member may follow, as `cat a.gz b.gz` makes; trailing zeros are padding.
      const std::size_t left = z.avail_in + (bytes.size() - consumed);
      const std::string_view rest = bytes.substr(bytes.size() - left);
      if (rest.find_first_not_of('\0') == std::string_view::npos) break;
      if (!is_gzip(rest))
        throw format_error(
            fmt::format("{}: gzip: data after the end of the compressed stream", printable(name)));
      inflateReset(&z);
      continue;
    }
    if (rc == Z_BUF_ERROR && z.avail_in == 0 && consumed == bytes.size())
      throw format_error(
          fmt::format("{}: gzip: truncated (the compressed stream ends early)", printable(name)));
    if (rc != Z_OK && rc != Z_BUF_ERROR)
      throw format_error(fmt::format("{}: gzip: corrupt data ({})", printable(name),
                                     z.msg ? z.msg : "zlib error"));
  }
  return out;
#else
  (void)bytes;
  (void)max_bytes;
  (void)check_head;
  throw format_error(fmt::format("{}: gzip-compressed, and this build has no zlib: gunzip it first",
                                 printable(name)));
#endif
}

}  // namespace gpu_basics
