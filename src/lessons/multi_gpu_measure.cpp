// The between-GPUs part of the transfer lesson, measured: peer-to-peer access, bandwidth and
// latency over every pair of visible GPUs, then the NCCL collectives over all of them.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "gpu_basics/lessons/measure.hpp"
#include "gpu_basics/lessons/multi_gpu.hpp"
#include "gpu_basics/transfer/multi_gpu.hpp"
#include "gpu_basics/transfer/nccl.hpp"
#include "gpu_basics/transfer/peer_bench.hpp"
#include "gpu_basics/transfer/plan.hpp"

namespace gpu_basics::lessons {

namespace {

peer_result peer_of(const peer_matrices& m) {
  peer_result p;
  p.devices = m.devices;
  p.can_access = m.can_access;
  p.bytes = m.bytes;
  p.latency_bytes = m.latency_bytes;
  std::uint64_t verified = 0;
  for (const auto& row : m.cells) {
    auto& out = p.cells.emplace_back();
    for (const auto& c : row) {
      out.push_back({c.uni_on, c.uni_off, c.bidir_on, c.bidir_off, c.latency_s, c.verified_bytes});
      verified += c.verified_bytes;
    }
  }
  p.verified_bytes = verified;
  return p;
}

collective_figure figure_of(const collective_measurement& c) {
  return {std::string(to_string(c.op)),
          c.bytes,
          c.ranks,
          c.time_s,
          c.rate.alg_bytes_per_s,
          c.rate.bus_bytes_per_s,
          c.verified_elements,
          c.sampling};
}

/// Every collective at every size of the sweep; a progress step per size.
nccl_result measure_nccl(context& ctx, const std::vector<int>& devices) {
  const auto& mg = ctx.cfg.transfer.multi_gpu;
  const stopping_rule rule = ctx.cfg.benchmark.rule();
  nccl_result r;
  std::string why;
  auto nccl = nccl_collectives::open(devices, &why);
  if (!nccl) {
    spdlog::warn("{}", why);
    r.unavailable = why;
    return r;
  }
  r.version = nccl->version();
  r.ranks = nccl->ranks();
  r.iterations = rule.max_samples;
  const collective ops[] = {collective::all_reduce, collective::all_gather,
                            collective::reduce_scatter};
  for (auto op : ops) r.ops.emplace_back(to_string(op));
  const auto sizes = power_of_two_sweep(mg.nccl_min_bytes, mg.nccl_max_bytes);
  const int total = static_cast<int>(sizes.size());
  for (int i = 0; i < total; ++i) {
    const std::uint64_t bytes = sizes[static_cast<std::size_t>(i)];
    ctx.report_progress(fmt::format("NCCL collectives, {}", format_bytes(bytes)), i, total);
    collective_size s;
    s.bytes = bytes;
    for (auto op : ops) s.ops.push_back(figure_of(nccl->run(op, bytes, rule)));
    r.sizes.push_back(std::move(s));
  }
  ctx.report_progress("NCCL collectives", total, total);
  return r;
}

}  // namespace

std::optional<multi_gpu_result> measure_multi_gpu(context& ctx) {
  const auto& mg = ctx.cfg.transfer.multi_gpu;
  if (!mg.enabled) return std::nullopt;
  std::vector<int> devices;
  for (const auto& d : ctx.devices) devices.push_back(d.index);
  multi_gpu_result r;
  ctx.report_progress("peer-to-peer matrices", 0, 1);
  r.peer = peer_of(measure_peer_matrices(devices, mg.peer_bytes, 4096, ctx.cfg.benchmark.rule()));
  ctx.report_progress("peer-to-peer matrices", 1, 1);
  r.nccl = measure_nccl(ctx, devices);
  return r;
}

}  // namespace gpu_basics::lessons
