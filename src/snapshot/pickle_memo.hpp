// The reader's memo: how many uses of each key the first pass counted ahead (memo_uses, counted by
// pickle_first_pass.cpp), the keys the memo holds (memo_keys) and the values it keeps while a
// use of them is ahead (memo_table). Private to the snapshot module (pickle_read*.cpp).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "gpu_basics/snapshot/pickle.hpp"
#include "pickle_cursor.hpp"

namespace gpu_basics::pickle::detail {

/// How many uses (GET) of each memo key are ahead, counted by a first pass over the pickle; a
/// count that reaches 255 stays there (the value is kept to the end).
class memo_uses {
 public:
  /// Every key used to the end (no first pass).
  static memo_uses all() {
    memo_uses u;
    u.all_ = true;
    return u;
  }
  /// The first pass, from where `c` is: it stops at STOP, or at an opcode it cannot step over
  /// (which the second pass refuses, there or before). Returns the bytes it went over.
  static memo_uses count(cursor& c, std::uint64_t& bytes);
  /// The dicts (EMPTY_DICT, DICT) the first pass saw.
  [[nodiscard]] std::uint64_t dicts() const noexcept { return dicts_; }

  /// Whether a use of `key` is ahead.
  [[nodiscard]] bool ahead(std::uint64_t key) const {
    if (all_) return true;
    if (key < dense_.size()) return dense_[key] != 0;
    return sparse_.count(key) != 0;
  }
  /// One use of `key` done; returns whether another is ahead.
  bool use(std::uint64_t key) {
    if (all_) return true;
    if (key < dense_.size()) {
      auto& n = dense_[key];
      if (n != kSticky && n != 0) --n;
      return n != 0;
    }
    const auto it = sparse_.find(key);
    if (it == sparse_.end()) return false;
    if (it->second != kSticky && --it->second == 0) {
      sparse_.erase(it);
      return false;
    }
    return true;
  }

  /// Whether `key`'s value is kept to the end (its count no longer goes down).
  [[nodiscard]] bool sticky(std::uint64_t key) const {
    if (all_) return true;
    if (key < dense_.size()) return dense_[key] == kSticky;
    const auto it = sparse_.find(key);
    return it != sparse_.end() && it->second == kSticky;
  }
  /// Takes back a use().
  void undo(std::uint64_t key) {
    if (all_) return;
    if (key < dense_.size()) {
      if (dense_[key] != kSticky) ++dense_[key];
    } else if (auto& n = sparse_[key]; n != kSticky) {
      ++n;
    }
  }

 private:
  static constexpr std::uint8_t kSticky = 255;

  void add(std::uint64_t key, std::uint64_t puts) {
    // Keys of real pickles count up from 0 (PUT / MEMOIZE): a table; others go in a map.
    if (key < dense_.size() || key < 2 * puts + 1024) {
      if (key >= dense_.size()) dense_.resize(std::max<std::size_t>(key + 1, 2 * dense_.size()));
      if (dense_[key] != kSticky) ++dense_[key];
    } else if (auto& n = sparse_[key]; n != kSticky) {
      ++n;
    }
  }

  bool all_ = false;
  std::uint64_t dicts_ = 0;
  std::vector<std::uint8_t> dense_;
  std::unordered_map<std::uint64_t, std::uint8_t> sparse_;
};

/// The keys the memo holds, as len(memo) counts them (MEMOIZE's key), whether or not their
/// values are kept.
class memo_keys {
 public:
  [[nodiscard]] std::uint64_t size() const noexcept { return dense_ + above_.size(); }
  /// Whether the keys are 0 .. size() - 1 (MEMOIZE's, as CPython writes them).
  [[nodiscard]] bool dense() const noexcept { return above_.empty(); }
  /// Back to the first `n` keys (dense()).
  void truncate(std::uint64_t n) noexcept { dense_ = n; }
  void add(std::uint64_t key) {
    if (key < dense_ || above_.count(key)) return;
    if (key != dense_) {
      above_.insert(key);
      return;
    }
    ++dense_;
    while (!above_.empty() && above_.erase(dense_)) ++dense_;
  }

 private:
  std::uint64_t dense_ = 0;  // 0 .. dense_ - 1 are all there
  std::unordered_set<std::uint64_t> above_;
};

/// The memo's values that have a use ahead (few at a time; one is looked up for every GET): an
/// open-addressing table of 32-byte slots, linear probing, removal by backward shift. The key
/// 2^64 - 1 marks a free slot; a value under that key (PUT can give it) is kept aside.
class memo_table {
 public:
  memo_table() : slots_(kFirst) {}

  [[nodiscard]] value* find(std::uint64_t key) {
    if (key == kFree) return last_ ? &*last_ : nullptr;
    for (std::size_t i = home(key);; i = (i + 1) & mask_) {
      slot& s = slots_[i];
      if (s.key == key) return &s.v;
      if (s.key == kFree) return nullptr;
    }
  }
  void put(std::uint64_t key, const value& v) {
    if (key == kFree) {
      last_ = v;
      return;
    }
    if (2 * (size_ + 1) > slots_.size()) grow();
    place(key, v);
  }
  /// Takes `key`'s value out (find() gave it).
  value take(std::uint64_t key) {
    if (key == kFree) {
      value out = std::move(*last_);
      last_.reset();
      return out;
    }
    std::size_t i = home(key);
    while (slots_[i].key != key) i = (i + 1) & mask_;
    value out = std::move(slots_[i].v);
    for (std::size_t j = (i + 1) & mask_; slots_[j].key != kFree; j = (j + 1) & mask_) {
      // The entry at j moves back to i when i lies between its home and j.
      if (((j - home(slots_[j].key)) & mask_) >= ((j - i) & mask_)) {
        slots_[i] = std::move(slots_[j]);
        i = j;
      }
    }
    slots_[i] = slot{};
    --size_;
    return out;
  }

 private:
  static constexpr std::uint64_t kFree = UINT64_MAX;
  struct slot {
    std::uint64_t key = kFree;
    value v;
  };
  static constexpr std::size_t kFirst = 64;

  [[nodiscard]] std::size_t home(std::uint64_t key) const noexcept {
    return static_cast<std::size_t>((key * 0x9E3779B97F4A7C15ull) >> 32) & mask_;
  }
  void place(std::uint64_t key, const value& v) {
    for (std::size_t i = home(key);; i = (i + 1) & mask_) {
      slot& s = slots_[i];
      if (s.key == kFree) {
        s = slot{key, v};
        ++size_;
        return;
      }
      if (s.key == key) {
        s.v = v;
        return;
      }
    }
  }
  void grow() {
    std::vector<slot> old(slots_.size() * 2);
    old.swap(slots_);
    mask_ = slots_.size() - 1;
    size_ = 0;
    for (auto& s : old)
      if (s.key != kFree) place(s.key, s.v);
  }

  std::vector<slot> slots_;
  std::size_t mask_ = kFirst - 1;
  std::size_t size_ = 0;
  std::optional<value> last_;
};

}  // namespace gpu_basics::pickle::detail
