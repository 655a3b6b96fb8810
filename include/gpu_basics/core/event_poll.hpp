// The one loop that polls stream-ordered work without blocking. Each pending entry holds an
// event and what it guards; entries whose event has completed are handed on and dropped, the
// rest wait for the next poll. Host-only and generic: the caller says how to ask an event (a CUDA
// backend, or a fake one in CPU tests). Asking a CUDA event is event_completed() in cuda.hpp.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

namespace gpu_basics {

/// Removes from `pending` every entry for which `done(entry)` is true (it must not block) and
/// passes it to `complete(entry)` after removal, so `complete` may add new entries. The order of
/// the entries left is not kept. Returns how many completed.
template <class Entry, class Done, class Complete>
std::size_t poll_completed(std::vector<Entry>& pending, Done&& done, Complete&& complete) {
  std::size_t n = 0;
  for (std::size_t i = 0; i < pending.size();) {
    if (!done(pending[i])) {
      ++i;
      continue;
    }
    Entry e = std::move(pending[i]);
    if (i + 1 != pending.size()) pending[i] = std::move(pending.back());
    pending.pop_back();
    complete(e);
    ++n;
  }
  return n;
}

}  // namespace gpu_basics
