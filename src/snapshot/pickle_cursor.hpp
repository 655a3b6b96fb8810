// The reader's input: a window over the pickle's bytes, all in memory or a chunk of a byte_source
// at a time. Private to the snapshot module (pickle_read*.cpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

#include "gpu_basics/snapshot/pickle.hpp"

namespace gpu_basics::pickle::detail {

/// The input as a window over its bytes: all of them (in memory), or a chunk of a byte_source,
/// refilled as reading moves on (the unread part kept, grown to what one opcode needs).
class cursor {
 public:
  explicit cursor(std::string_view all) : in_(all) {}
  explicit cursor(byte_source& src) : src_(&src), total_(src.size()) {}

  /// The offset of the next byte in the whole input.
  [[nodiscard]] std::uint64_t offset() const noexcept { return base_ + pos_; }
  /// Whether `n` more bytes can be read; when not, left() says how many the input has.
  [[nodiscard]] bool has(std::size_t n) { return n <= in_.size() - pos_ || refill(n); }
  [[nodiscard]] std::uint64_t left() const noexcept { return left_; }
  /// The next byte, or the next `n` (has() said they are there); a view valid until the next
  /// has(), line() or rest().
  unsigned char next() noexcept { return static_cast<unsigned char>(in_[pos_++]); }
  /// The bytes in view from here on (has() says how many), and a step over `n` of them.
  [[nodiscard]] const unsigned char* here() const noexcept {
    return reinterpret_cast<const unsigned char*>(in_.data()) + pos_;
  }
  void skip(std::size_t n) noexcept { pos_ += n; }
  [[nodiscard]] std::size_t ahead() const noexcept { return in_.size() - pos_; }
  /// The byte `k` places ahead (has(k + 1) said it is there), not taken.
  [[nodiscard]] unsigned char peek(std::size_t k = 0) const noexcept {
    return static_cast<unsigned char>(in_[pos_ + k]);
  }
  std::string_view take(std::size_t n) noexcept {
    const auto s = in_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  /// The bytes up to the next '\n' (skipped), or nullopt when there is none.
  std::optional<std::string_view> line() {
    std::uint64_t from = offset();  // where the search goes on
    for (;;) {
      const auto nl = in_.find('\n', static_cast<std::size_t>(from - base_));
      if (nl != std::string_view::npos) {
        const auto s = in_.substr(pos_, nl - pos_);
        pos_ = nl + 1;
        return s;
      }
      from = base_ + in_.size();
      if (!refill(in_.size() - pos_ + 1)) return std::nullopt;
    }
  }
  /// The number of bytes from here to the end (the rest of a source is read).
  std::uint64_t rest() {
    std::uint64_t n = in_.size() - pos_;
    pos_ = in_.size();
    if (src_ && !end_) {
      buf_.resize(std::max(buf_.size(), kChunk));
      while (const std::size_t r = src_->read(buf_.data(), buf_.size())) n += r;
      end_ = true;
      in_ = {};
      pos_ = 0;
    }
    return n;
  }
  /// Keeps the bytes from here on in view until unpin(), so that reading can go back here.
  void pin() noexcept { pin_ = offset(); }
  void unpin() noexcept { pin_.reset(); }
  /// Back to the pin (which stays).
  void back_to_pin() noexcept { pos_ = static_cast<std::size_t>(*pin_ - base_); }
  /// The bytes at `offset` (from the pin on, in view), valid until the next has() or line().
  [[nodiscard]] std::string_view view(std::uint64_t offset, std::size_t n) const noexcept {
    return in_.substr(static_cast<std::size_t>(offset - base_), n);
  }
  /// How far reading is past the pin.
  [[nodiscard]] std::uint64_t past_pin() const noexcept { return offset() - *pin_; }

  /// Back to the first byte.
  void rewind() {
    pos_ = 0;
    pin_.reset();
    if (!src_) return;
    src_->rewind();
    in_ = {};
    base_ = 0;
    end_ = false;
  }

 private:
  static constexpr std::size_t kChunk = 256u << 10;

  bool refill(std::size_t n) {
    const std::size_t have = in_.size() - pos_;
    left_ = have;
    if (!src_ || end_) return false;
    if (total_ && *total_ >= offset() && n > *total_ - offset()) {  // past the size it said
      left_ = std::max<std::uint64_t>(have, *total_ - offset());
      return false;
    }
    // Bytes before the pin (or before pos_) are dropped; the rest move to the buffer's start.
    const std::size_t keep = pin_ ? static_cast<std::size_t>(*pin_ - base_) : pos_;
    const std::size_t kept = in_.size() - keep;
    const std::size_t need = pos_ - keep + n;
    if (buf_.size() < std::max(need, kChunk)) {
      std::string bigger(std::max(need, kChunk), '\0');
      std::memcpy(bigger.data(), in_.data() + keep, kept);
      buf_.swap(bigger);
    } else {
      std::memmove(buf_.data(), in_.data() + keep, kept);
    }
    base_ += keep;
    pos_ -= keep;
    std::size_t got = kept;
    while (got < need) {
      const std::size_t r = src_->read(buf_.data() + got, buf_.size() - got);
      if (r == 0) {
        end_ = true;
        break;
      }
      got += r;
    }
    in_ = std::string_view(buf_.data(), got);
    left_ = got - pos_;
    return got >= need;
  }

  std::string_view in_;
  std::size_t pos_ = 0;
  std::uint64_t base_ = 0;  // offset of in_[0]
  byte_source* src_ = nullptr;
  std::optional<std::uint64_t> total_;
  std::optional<std::uint64_t> pin_;
  std::string buf_;
  bool end_ = false;
  std::uint64_t left_ = 0;
};

}  // namespace gpu_basics::pickle::detail
