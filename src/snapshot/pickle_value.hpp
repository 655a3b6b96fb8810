// The inside of a pickle value, which the reader (pickle_read*.cpp) and the values' own code
// (pickle.cpp) share: the nodes of lists, tuples and dicts, with what read() keeps in them
// (sealed, left out, the sink's list id and count). Private to the snapshot module.
#pragma once

#include <cstdint>
#include <memory>
#include <variant>

#include "gpu_basics/snapshot/pickle.hpp"

namespace gpu_basics::pickle {

namespace detail {
/// a + b, or UINT64_MAX when that overflows.
[[nodiscard]] inline std::uint64_t add_saturating(std::uint64_t a, std::uint64_t b) noexcept {
  return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}
}  // namespace detail

struct value::seq_node {
  items v;
  std::uint32_t height = 1;  // nesting levels, this one included
  bool tuple = false;
  bool sealed = false;        // read(): shared or inside another container, so never changed
  bool left_out = false;      // read(): under an opaque key; its items are not kept
  std::uint64_t values = 1;   // tree_values()
  std::uint64_t list_id = 0;  // list_id()
  std::size_t taken = 0;      // taken()
};

struct value::dict_node {
  entries v;
  std::uint32_t height = 1;
  bool sealed = false;
  bool left_out = false;
  std::uint64_t values = 1;
};

inline std::uint64_t value::tree_size() const noexcept {
  if (const auto* n = std::get_if<std::shared_ptr<seq_node>>(&d_)) return (*n)->values;
  if (const auto* n = std::get_if<std::shared_ptr<dict_node>>(&d_)) return (*n)->values;
  return 1;
}

inline std::uint32_t value::height() const noexcept {
  if (const auto* n = std::get_if<std::shared_ptr<seq_node>>(&d_)) return (*n)->height;
  if (const auto* n = std::get_if<std::shared_ptr<dict_node>>(&d_)) return (*n)->height;
  if (const auto* u = std::get_if<left_out_use>(&d_)) return u->height;
  return 0;
}

}  // namespace gpu_basics::pickle
