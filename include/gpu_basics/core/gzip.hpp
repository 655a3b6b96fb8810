// gzip-compressed inputs: a snapshot saved as snapshot.pickle.gz is read like the plain file.
// Host-only; needs zlib at build time (without it, a compressed input is one clear error).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace gpu_basics {

/// Whether `bytes` start as a gzip member does (1f 8b 08).
[[nodiscard]] bool is_gzip(std::string_view bytes) noexcept;

/// The decompressed bytes of the gzip data `bytes` (every member, as gunzip writes them);
/// `name` starts every message.
/// @throws format_error naming `name` when the data is corrupt or truncated, when it would
/// decompress to more than `max_bytes` (checked as it goes: a small file that expands without
/// end is refused before it fills memory), or when this build has no zlib; interrupted on
/// Ctrl-C / SIGTERM. `check_head`, where given, sees the first 64 decompressed bytes (or all of
/// them, when fewer) as soon as they are out, and may throw: data that is not what it should be
/// is refused before the rest is inflated.
[[nodiscard]] std::string gunzip(std::string_view bytes, std::uint64_t max_bytes,
                                 std::string_view name,
                                 const std::function<void(std::string_view)>& check_head = {});

}  // namespace gpu_basics
