// The timed loop of the mixed-trace benchmarks: mixed_trace() of replay.hpp (up to 256 live
// blocks, sizes log-uniform 512 B - 32 MiB) through any allocate/free pair, reported in ns per
// operation.
#pragma once

#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include "gpu_basics/snapshot/replay.hpp"

namespace gpu_basics::bench {

inline const std::vector<replay_event>& mixed() {
  static const std::vector<replay_event> ops = mixed_trace();
  return ops;
}

/// Runs mixed() under `state`; `slots` (256 entries, mixed_trace's ids) holds what is live, so a
/// caller that catches an exception can free it.
template <class Alloc, class Free>
void run_mixed_trace(benchmark::State& state, std::vector<void*>& slots, Alloc alloc,
                     Free release) {
  const auto& ops = mixed();
  slots.assign(256, nullptr);
  for (auto _ : state)
    for (const auto& op : ops) {
      if (op.kind == replay_event::op::alloc) {
        slots[op.id] = alloc(op.bytes);
      } else {
        release(slots[op.id]);
        slots[op.id] = nullptr;
      }
    }
  const double done = static_cast<double>(state.iterations()) * static_cast<double>(ops.size());
  state.SetItemsProcessed(static_cast<std::int64_t>(done));
  state.counters["ns_per_op"] =
      benchmark::Counter(done, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

}  // namespace gpu_basics::bench
