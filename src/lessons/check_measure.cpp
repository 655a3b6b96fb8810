// measure_check: the GPU part of `gpu-basics check`. Only what the verdicts need: NVML's health
// readings first (the GPU still idle), then pinned H2D, D2H and both at once, one D2D copy, and
// one bf16 GEMM checked against the CPU. No printing.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "gpu_basics/core/clock.hpp"
#include "gpu_basics/core/cuda.hpp"
#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/nvml.hpp"
#include "gpu_basics/lessons/check.hpp"
#include "gpu_basics/lessons/measure.hpp"
#include "gpu_basics/profiler/gemm.hpp"
#include "gpu_basics/profiler/gemm_runner.hpp"
#include "gpu_basics/transfer/copy_bench.hpp"

namespace gpu_basics::lessons {

namespace {

constexpr int kMaxCandidates = 8;

std::string status_text(metric_status s) {
  return std::string(to_string(s));
}

check_health read_health(const nvml& nv, nvml_device d) {
  check_health h;
  const auto reasons = nv.clock_event_reasons(d);
  h.throttle_status = status_text(reasons.status);
  h.idle_clock_event_reasons = reasons.get();
  const auto vol = nv.ecc_uncorrected(d, false);
  const auto agg = nv.ecc_uncorrected(d, true);
  h.ecc_status = status_text(vol.status);
  h.ecc_uncorrected_volatile = vol.get();
  h.ecc_uncorrected_aggregate = agg.get();
  const auto pages = nv.retired_pages(d);
  h.retired_status = status_text(pages.status);
  h.retired_pages = pages.get();
  h.retired_pending = nv.retired_pages_pending(d).get();
  const auto rows = nv.remapped_rows(d);
  h.remap_status = status_text(rows.status);
  if (rows.ok()) {
    h.remapped_correctable = rows.value.correctable;
    h.remapped_uncorrectable = rows.value.uncorrectable;
    h.remap_pending = rows.value.pending;
    h.remap_failure = rows.value.failure;
  }
  return h;
}

/// The link as NVML reads it now; keeps the best generation and width seen (it drops at idle).
void read_link(const nvml* nv, const std::optional<nvml_device>& d, check_result& r) {
  if (!nv || !d) return;
  if (const auto g = nv->pcie_link_generation(*d).get())
    r.link_generation = std::max(r.link_generation.value_or(0), *g);
  if (const auto w = nv->pcie_link_width(*d).get())
    r.link_width = std::max(r.link_width.value_or(0), *w);
}

}  // namespace

check_result measure_check(context& ctx) {
  const double start = host_seconds();
  const config& cfg = ctx.cfg;
  const device_info& dev = ctx.device();
  check_result r = check_result_of(device_facts::of(dev, ctx.nvml_status));
  r.thresholds = thresholds_of(cfg);

  std::optional<nvml_device> handle;
  if (ctx.nv) {
    const auto h = ctx.nv->device_by_pci_bus_id(dev.pci_bus_id);
    if (h.ok()) {
      handle = h.value;
      r.health = read_health(*ctx.nv, *handle);  // before any work: the GPU is idle
    } else {
      r.nvml_status =
          fmt::format("NVML does not find {} ({})", dev.pci_bus_id, to_string(h.status));
    }
  }

  const int total = 6;
  int done = 0;
  const auto step = [&](const std::string& what) {
    ctx.report_progress(what, done++, total);
    spdlog::info("check: {}", what);
  };
  const auto verified = [&](const char* what, auto&& measure) -> std::optional<copy_figure> {
    try {
      return figure_of(measure());
    } catch (const verification_error& e) {
      r.verification_failures.push_back(fmt::format("{}: {}", what, e.what()));
      return std::nullopt;
    }
  };
  const std::uint64_t bytes = cfg.check.copy_bytes;
  {
    copy_bench bench(cfg.benchmark.rule());
    step("pinned H2D " + std::to_string(bytes >> 20) + " MiB");
    r.h2d = verified("pinned H2D",
                     [&] { return bench.copy(copy_direction::h2d, host_memory::pinned, bytes); });
    read_link(ctx.nv.get(), handle, r);
    step("pinned D2H");
    r.d2h = verified("pinned D2H",
                     [&] { return bench.copy(copy_direction::d2h, host_memory::pinned, bytes); });
    read_link(ctx.nv.get(), handle, r);
    step("H2D + D2H at once");
    r.bidirectional = verified("H2D + D2H at once", [&] { return bench.bidirectional(bytes); });
    read_link(ctx.nv.get(), handle, r);
    step("D2D");
    r.d2d = verified("D2D",
                     [&] { return bench.copy(copy_direction::d2d, host_memory::pinned, bytes); });
  }

  step("bf16 GEMM check");
  cuda_stream s;
  gemm_runner gemm(cfg.profiler.matmul.workspace_bytes, kMaxCandidates);
  const auto check_n = static_cast<std::uint64_t>(cfg.profiler.matmul.check_size);
  const double err = gemm.check(gemm_precision::bf16, check_n, s);
  if (!(err <= gemm_tolerance(gemm_precision::bf16)))
    r.verification_failures.push_back(
        fmt::format("bf16 GEMM {}^3: relative error {:.3g} against the CPU exceeds {:.3g}", check_n,
                    err, gemm_tolerance(gemm_precision::bf16)));
  const auto n = static_cast<std::uint64_t>(cfg.check.gemm_size);
  step(fmt::format("bf16 GEMM {}^3", n));
  const auto res = gemm.run(gemm_precision::bf16, {n, n, n}, cfg.benchmark.rule(), s);
  r.gemm = matmul_of(res, err, r.bf16_peak_flops_per_s);
  ctx.report_progress("check", total, total);

  r.items = evaluate_check(r);
  r.elapsed_s = host_seconds() - start;
  return r;
}

}  // namespace gpu_basics::lessons
