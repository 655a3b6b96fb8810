// The cost of summarizing samples, beside a plain sort of the same samples (its floor).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <random>
#include <vector>

#include "gpu_basics/core/stats.hpp"

namespace {
std::vector<double> samples(std::size_t n) {
  std::mt19937_64 rng(7);
  std::lognormal_distribution<double> d(0.0, 0.3);
  std::vector<double> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

void BM_Summarize(benchmark::State& state) {
  const auto v = samples(static_cast<std::size_t>(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(gpu_basics::summarize(v));
  state.SetItemsProcessed(state.iterations() * state.range(0));
}

void BM_SortOnly(benchmark::State& state) {
  const auto v = samples(static_cast<std::size_t>(state.range(0)));
  for (auto _ : state) {
    auto c = v;
    std::sort(c.begin(), c.end());
    benchmark::DoNotOptimize(c.data());
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
}  // namespace

BENCHMARK(BM_Summarize)->Arg(20)->Arg(1000)->Arg(100000);
BENCHMARK(BM_SortOnly)->Arg(20)->Arg(1000)->Arg(100000);
BENCHMARK_MAIN();
