// advise's policy search on a 100k-event trace: every searched policy replayed (144 and the
// defaults' details: bisection, stranded split, curve), on one thread and on two, beside
// replay's fixed sweep of nine policies on the same trace (the peer: one replay per policy).
// Host-only; the bound (issue: under 10 s on 2 cores) is read from its time.
//   build/default/bench/gpu_basics_bench_advise
#include <benchmark/benchmark.h>

#include <map>

#include "gpu_basics/core/thread_pool.hpp"
#include "gpu_basics/snapshot/advise.hpp"
#include "gpu_basics/snapshot/policy_sweep.hpp"

namespace {

using gpu_basics::replay_event;

/// The synthetic transformer trace of replay.hpp, as a snapshot's device trace.
const gpu_basics::torch_snapshot& snapshot() {
  static const gpu_basics::torch_snapshot s = [] {
    gpu_basics::torch_snapshot out;
    out.device_traces.emplace_back();
    std::map<std::uint64_t, std::size_t> live;
    for (const replay_event& e : gpu_basics::transformer_trace(220)) {
      gpu_basics::torch_trace_event t;
      t.addr = e.id;
      if (e.kind == replay_event::op::alloc) {
        t.action = gpu_basics::torch_action::alloc;
        t.size = live[e.id] = e.bytes;
      } else {
        t.action = gpu_basics::torch_action::free_requested;
        t.size = live[e.id];
      }
      out.device_traces.back().push_back(t);
    }
    return out;
  }();
  return s;
}

void BM_Advise(benchmark::State& state) {
  const auto confs = gpu_basics::advise_policies({});
  const auto threads = static_cast<unsigned>(state.range(0));
  gpu_basics::advice a;
  for (auto _ : state) a = gpu_basics::advise_snapshot(snapshot(), "bench", 0, confs, {}, threads);
  state.counters["events"] = static_cast<double>(a.trace_events);
  state.counters["policies"] = static_cast<double>(a.policies.size());
  state.counters["threads"] = a.threads;
}

void BM_AdviseWithFit(benchmark::State& state) {
  const auto confs = gpu_basics::advise_policies({});
  gpu_basics::advice a;
  for (auto _ : state) {
    a = gpu_basics::advise_snapshot(snapshot(), "bench", 0, confs, {std::size_t{24} << 30}, 2);
  }
  state.counters["events"] = static_cast<double>(a.trace_events);
  state.counters["policies"] = static_cast<double>(a.policies.size());
  state.counters["threads"] = a.threads;
}

void BM_ReplaySweep(benchmark::State& state) {
  const auto confs = gpu_basics::replay_policies({});
  gpu_basics::replay_report r;
  for (auto _ : state) r = gpu_basics::replay_snapshot(snapshot(), "bench", 0, confs);
  state.counters["events"] = static_cast<double>(r.trace_events);
  state.counters["policies"] = static_cast<double>(r.policies.size());
}

}  // namespace

BENCHMARK(BM_Advise)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_AdviseWithFit)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_ReplaySweep)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_MAIN();
