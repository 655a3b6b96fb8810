#include "gpu_basics/profiler/gemm.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/stats.hpp"

namespace gpu_basics {

std::string_view to_string(gemm_precision p) noexcept {
  switch (p) {
    case gemm_precision::fp16:
      return "fp16";
    case gemm_precision::bf16:
      return "bf16";
    case gemm_precision::tf32:
      return "tf32";
    case gemm_precision::fp32:
      return "fp32";
  }
  return "?";
}

std::optional<gemm_precision> parse_gemm_precision(std::string_view s) {
  for (gemm_precision p :
       {gemm_precision::fp16, gemm_precision::bf16, gemm_precision::tf32, gemm_precision::fp32})
    if (to_string(p) == s) return p;
  return std::nullopt;
}

double datasheet_peak_flops(const gpu_datasheet& d, gemm_precision p) noexcept {
  switch (p) {
    case gemm_precision::fp16:
      return d.fp16_flops;
    case gemm_precision::bf16:
      return d.bf16_flops;
    case gemm_precision::tf32:
      return d.tf32_flops;
    case gemm_precision::fp32:
      return d.fp32_flops;
  }
  return 0;
}

double max_relative_error(std::span<const double> got, std::span<const double> ref) {
  GPU_BASICS_EXPECTS(got.size() == ref.size() && !ref.empty(),
                     "result and reference differ in size");
  double worst = 0, scale = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double diff = std::abs(got[i] - ref[i]);
    worst = std::isnan(diff) ? HUGE_VAL : std::max(worst, diff);
    scale = std::max(scale, std::abs(ref[i]));
  }
  return scale > 0 ? worst / scale : worst;
}

double gemm_tolerance(gemm_precision p) noexcept {
  switch (p) {
    case gemm_precision::fp16:
      return 1e-2;
    case gemm_precision::bf16:
      return 2e-2;
    case gemm_precision::tf32:
      return 1e-2;
    case gemm_precision::fp32:
      return 1e-4;
  }
  return 0;
}

std::vector<std::vector<double>> time_candidates_interleaved(
    int candidates, int rounds, const std::function<std::optional<double>(int)>& time_once) {
  std::vector<std::vector<double>> times(static_cast<std::size_t>(std::max(candidates, 0)));
  std::vector<bool> failed(times.size(), false);
  for (int round = 0; round < rounds; ++round)
    for (std::size_t c = 0; c < times.size(); ++c) {
      if (failed[c]) continue;
      if (const auto t = time_once(static_cast<int>(c))) {
        times[c].push_back(*t);
      } else {
        failed[c] = true;
        times[c].clear();
      }
    }
  return times;
}

int fastest_candidate(const std::vector<std::vector<double>>& seconds) {
  int best = -1;
  double best_t = HUGE_VAL;
  for (std::size_t i = 0; i < seconds.size(); ++i) {
    if (seconds[i].empty()) continue;
    const double t = summarize(seconds[i]).median;
    if (t < best_t) {
      best_t = t;
      best = static_cast<int>(i);
    }
  }
  return best;
}

}  // namespace gpu_basics
