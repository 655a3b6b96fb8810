// advise's policy search on a 100k-event trace: every searched policy replayed (48 without --fit,
// 144 with it, and the defaults' details: bisection, stranded split, curve), on one thread and on
// two, beside replay's fixed sweep of eight policies on the same trace (the peer: one replay per
// policy). Then a random trace of a million events, advise against replay (issue 43's target:
// within 3x of replay's time), and traces of one block on each of N streams (the cost must grow
// with N, not with its square). Then pre-flight over three recordings of the transformer trace
// (issue 48's target: a 100k-event recording predicted in under 10 s on 2 cores). Then advise
// on a snapshot's pickle bytes as gpu_basics_torch_advise() runs it when a job runs out of memory
// (issue 44's target: 100k events within 3 s on 2 cores, parse and frames included). Host-only.
//   build/default/bench/gpu_basics_bench_advise
#include <benchmark/benchmark.h>

#include <map>

#include "gpu_basics/core/thread_pool.hpp"
#include "gpu_basics/snapshot/advise.hpp"
#include "gpu_basics/snapshot/pickle.hpp"
#include "gpu_basics/snapshot/policy_sweep.hpp"
#include "gpu_basics/snapshot/preflight.hpp"

namespace {

using gpu_basics::replay_event;

/// The synthetic transformer trace of replay.hpp, as a snapshot's device trace.
const gpu_basics::torch_snapshot& snapshot() {
  static const gpu_basics::torch_snapshot s =
      gpu_basics::torch_snapshot_of(gpu_basics::transformer_trace(220));
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
  const auto confs = gpu_basics::advise_policies({}, true);
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

const gpu_basics::torch_snapshot& random_1m() {
  static const gpu_basics::torch_snapshot s =
      gpu_basics::torch_snapshot_of(gpu_basics::mixed_trace(1000000, 5));
  return s;
}

void BM_AdviseRandom1M(benchmark::State& state) {
  const auto confs = gpu_basics::advise_policies({});
  gpu_basics::advice a;
  for (auto _ : state) a = gpu_basics::advise_snapshot(random_1m(), "random", 0, confs, {}, 2);
  state.counters["events"] = static_cast<double>(a.trace_events);
  state.counters["policies"] = static_cast<double>(a.policies.size());
}

void BM_ReplayRandom1M(benchmark::State& state) {
  const auto confs = gpu_basics::replay_policies({});
  gpu_basics::replay_report r;
  for (auto _ : state) r = gpu_basics::replay_snapshot(random_1m(), "random", 0, confs, 2);
  state.counters["events"] = static_cast<double>(r.trace_events);
  state.counters["policies"] = static_cast<double>(r.policies.size());
}

/// One 1 MiB block on each of `n` streams, then every one freed.
gpu_basics::torch_snapshot streams(std::size_t n) {
  std::vector<replay_event> t;
  for (std::size_t i = 0; i < n; ++i) t.push_back({replay_event::op::alloc, i + 1, 1 << 20, i + 1});
  for (std::size_t i = 0; i < n; ++i) t.push_back({replay_event::op::free, i + 1, 0, i + 1});
  return gpu_basics::torch_snapshot_of(t);
}

void BM_ReplayManyStreams(benchmark::State& state) {
  const auto s = streams(static_cast<std::size_t>(state.range(0)));
  const auto confs = gpu_basics::replay_policies({});
  for (auto _ : state)
    benchmark::DoNotOptimize(gpu_basics::replay_snapshot(s, "streams", 0, confs, 1));
  state.SetComplexityN(state.range(0));
}

void BM_AdviseManyStreams(benchmark::State& state) {
  const auto s = streams(static_cast<std::size_t>(state.range(0)));
  const auto confs = gpu_basics::advise_policies({});
  for (auto _ : state)
    benchmark::DoNotOptimize(gpu_basics::advise_snapshot(s, "streams", 0, confs, {}, 2));
  state.SetComplexityN(state.range(0));
}

/// The transformer trace recorded at batches 2, 4 and 8: each size s becomes s + s / 64 * batch.
std::vector<gpu_basics::batch_recording> transformer_recordings() {
  const auto base = gpu_basics::transformer_trace(220);
  std::vector<gpu_basics::batch_recording> v;
  for (const std::size_t batch : {2, 4, 8}) {
    gpu_basics::batch_recording r{batch, "transformer", base, {}};
    for (auto& e : r.events) e.bytes += e.bytes / 64 * batch;
    v.push_back(std::move(r));
  }
  return v;
}

/// The model, peaks at two batches under the defaults and the recommendation (advise on the
/// largest recording included) and the largest batch under 4x the peak at batch 8, on 2 threads.
void BM_Preflight(benchmark::State& state) {
  gpu_basics::preflight_report r;
  for (auto _ : state) {
    const gpu_basics::batch_model m(transformer_recordings());
    const std::size_t limit = 4 * gpu_basics::predict_at(m, 8, {}).peak_reserved;
    r = gpu_basics::run_preflight(m, {16, 64}, limit, 2);
  }
  state.counters["events"] = static_cast<double>(r.events.back());
}

/// The transformer trace as PyTorch pickles a snapshot recorded with stacks="python": each entry
/// with its own 12 frames, ending in the oom entry of a request that failed.
const std::string& transformer_pickle() {
  static const std::string bytes = [] {
    using gpu_basics::pickle::value;
    const gpu_basics::torch_snapshot s = snapshot();
    value trace = value::list();
    std::int64_t t = 0;
    for (const auto& e : s.device_traces[0]) {
      value d = value::dict();
      d.set("action",
            value::str(e.action == gpu_basics::torch_action::alloc ? "alloc" : "free_requested"));
      d.set("addr", value::integer(static_cast<std::int64_t>(e.addr)));
      d.set("size", value::integer(static_cast<std::int64_t>(e.size)));
      d.set("stream", value::integer(e.stream));
      d.set("time_us", value::integer(++t));
      value frames = value::list();
      for (int f = 0; f < 12; ++f) {
        value fr = value::dict();
        fr.set("filename",
               value::str("/home/user/project/model_" + std::to_string(t % 50) + ".py"));
        fr.set("line", value::integer(10 + f));
        fr.set("name", value::str("forward_" + std::to_string(f)));
        frames.append(std::move(fr));
      }
      d.set("frames", std::move(frames));
      trace.append(std::move(d));
    }
    value oom = value::dict();
    oom.set("action", value::str("oom"));
    oom.set("device_free", value::integer(0));
    oom.set("size", value::integer(std::int64_t{1} << 30));
    oom.set("stream", value::integer(0));
    oom.set("frames", value::list());
    trace.append(std::move(oom));
    value root = value::dict();
    root.set("segments", value::list());
    value traces = value::list();
    traces.append(std::move(trace));
    root.set("device_traces", std::move(traces));
    return gpu_basics::pickle::dumps(root);
  }();
  return bytes;
}

/// gpu_basics_torch_advise()'s work at an out-of-memory error: parse, 144 policies under the
/// memory the job had, frames, on 2 threads.
void BM_AdviseBytesAtOom(benchmark::State& state) {
  gpu_basics::advise_request r;
  r.fit_limits = {std::size_t{24} << 30};
  r.device_memory = std::size_t{80} << 30;
  r.threads = 2;
  const std::string& bytes = transformer_pickle();  // made before the clock starts
  gpu_basics::bytes_advice b;
  for (auto _ : state) b = gpu_basics::advise_from_bytes(bytes, r);
  state.counters["events"] = static_cast<double>(b.a.trace_events);
  state.counters["pickle_MiB"] = static_cast<double>(transformer_pickle().size()) / (1 << 20);
  state.counters["policies"] = static_cast<double>(b.a.policies.size());
}

}  // namespace

BENCHMARK(BM_AdviseBytesAtOom)->Unit(benchmark::kSecond)->UseRealTime()->Iterations(1);
BENCHMARK(BM_Preflight)->Unit(benchmark::kSecond)->UseRealTime()->Iterations(1);
BENCHMARK(BM_AdviseRandom1M)->Unit(benchmark::kSecond)->UseRealTime()->Iterations(1);
BENCHMARK(BM_ReplayRandom1M)->Unit(benchmark::kSecond)->UseRealTime()->Iterations(1);
BENCHMARK(BM_ReplayManyStreams)
    ->RangeMultiplier(2)
    ->Range(1000, 8000)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Complexity();
BENCHMARK(BM_AdviseManyStreams)
    ->RangeMultiplier(2)
    ->Range(1000, 8000)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Complexity();
BENCHMARK(BM_Advise)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_AdviseWithFit)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_ReplaySweep)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_MAIN();
