// sample_each (core/sampling.hpp) for a run that yields several figures at once: the stopping
// rule follows one of them, the others are side series collected alongside, one value per run,
// without the warm-up's. Host-only.
#pragma once

#include <initializer_list>
#include <vector>

#include "gpu_basics/core/sampling.hpp"

namespace gpu_basics {

/// Runs `one()` rule.warmup times untimed, clears every series in `sides` (so they hold the kept
/// runs only: pass series of this figure alone), then samples by `rule` without a further
/// warm-up. `one` returns the sample the rule follows (seconds: smaller is faster), appended to
/// `out`, and appends one value to each side series itself. Returns the samples' outcome.
template <class F>
sampling_outcome sample_each_with_sides(const stopping_rule& rule, std::vector<double>& out,
                                        std::initializer_list<std::vector<double>*> sides, F one) {
  for (int i = 0; i < rule.warmup; ++i) (void)one();
  for (std::vector<double>* s : sides) s->clear();
  stopping_rule kept = rule;
  kept.warmup = 0;
  return sample_each(kept, out, one);
}

}  // namespace gpu_basics
