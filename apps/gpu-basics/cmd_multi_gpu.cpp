// The between-GPUs part of `gpu-basics transfer`: peer-to-peer access, bandwidth and latency
// matrices over every visible GPU, and NCCL collectives with nccl-tests' bus bandwidth. With one
// GPU the matrices are one cell (copies within that GPU) and the collectives run with one rank.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "gpu_basics/core/hardware.hpp"
#include "gpu_basics/transfer/multi_gpu.hpp"
#include "gpu_basics/transfer/nccl.hpp"
#include "gpu_basics/transfer/peer_bench.hpp"
#include "gpu_basics/transfer/plan.hpp"
#include "lesson.hpp"

namespace gpu_basics::cli {

namespace {

using cell_of = std::optional<summary> peer_cell::*;

table bandwidth_matrix(const peer_matrices& m, std::string id, std::string title, cell_of which) {
  std::vector<std::vector<value>> cells(m.devices.size());
  for (std::size_t i = 0; i < m.devices.size(); ++i)
    for (std::size_t j = 0; j < m.devices.size(); ++j) {
      const auto& s = m.cells[i][j].*which;
      value v;  // null where nothing was measured
      if (s) v = s->median;
      cells[i].push_back(std::move(v));
    }
  return matrix_table(std::move(id), std::move(title), cells, "GB/s", 1e-9, 1);
}

}  // namespace

void add_multi_gpu(context& ctx, report& r) {
  const auto& mg = ctx.cfg.transfer.multi_gpu;
  if (!mg.enabled) return;
  const int warmup = ctx.cfg.benchmark.warmup_iterations, iters = ctx.cfg.benchmark.iterations;
  std::vector<int> devices;
  for (const auto& d : ctx.devices) devices.push_back(d.index);
  const std::size_t n = devices.size();
  const bool one = n == 1;

  // ---- peer-to-peer matrices ------------------------------------------------------------------
  const peer_matrices m = measure_peer_matrices(devices, mg.peer_bytes, 4096, warmup, iters);
  {
    std::vector<std::vector<value>> access(n);
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < n; ++j)
        access[i].push_back(std::string(i == j ? "self" : m.can_access[i][j] ? "yes" : "no"));
    table t = matrix_table("p2p_access", "Peer access (cudaDeviceCanAccessPeer): can GPU i read and write GPU j's memory?",
                           access, "", 1.0, 0);
    t.notes.push_back(
        one ? "- One GPU visible: every matrix below is one cell, a copy within that GPU. With two or more "
              "GPUs each cell is a copy between two of them, over NVLink where the GPUs are linked, "
              "else over PCIe."
            : "- 'yes': copies go straight between the GPUs (NVLink, or PCIe peer-to-peer); 'no': the "
              "driver stages them through host memory.");
    r.tables.push_back(std::move(t));
  }
  std::uint64_t verified = 0;
  for (const auto& row : m.cells)
    for (const auto& c : row) verified += c.verified_bytes;
  {
    table t = bandwidth_matrix(m, "p2p_bandwidth",
                               fmt::format("Peer copy bandwidth, one direction, peer access on ({} per copy, median)",
                                           format_bytes(m.bytes)),
                               &peer_cell::uni_on);
    const auto& d = m.cells[0][0].uni_on;
    if (d) {
      const auto sheet = find_datasheet(ctx.devices[0].name);
      t.notes.push_back(fmt::format(
          "- The diagonal is a copy within one GPU: {:.0f} GB/s counted once ({:.0f} GB/s of HBM traffic, "
          "read + write{}). Between GPUs the link sets the pace: NVLink 4 on H100/H200 carries about "
          "450 GB/s per direction, PCIe Gen5 x16 about 63 GB/s.",
          d->median * 1e-9, 2 * d->median * 1e-9,
          sheet ? fmt::format(", {:.0f}% of the {:.2f} TB/s datasheet", 100.0 * 2 * d->median / sheet->hbm_bytes_per_s,
                              sheet->hbm_bytes_per_s * 1e-12)
                : std::string()));
    }
    t.notes.push_back(fmt::format("- Every sample's destination was zeroed first and checked after: {} verified.",
                                  format_bytes(verified)));
    r.tables.push_back(std::move(t));
  }
  r.tables.push_back(bandwidth_matrix(m, "p2p_bandwidth_peer_off",
                                      "Peer copy bandwidth, one direction, peer access off (staged through the host)",
                                      &peer_cell::uni_off));
  {
    table t = bandwidth_matrix(m, "p2p_bidirectional", "Peer copy bandwidth, both directions at once, peer access on",
                               &peer_cell::bidir_on);
    t.notes.push_back(
        "- Both directions run together, each on its own stream and copy engine; the figure is the sum of "
        "the two concurrent rates. A link that is full duplex shows about twice the one-way figure.");
    r.tables.push_back(std::move(t));
  }
  r.tables.push_back(bandwidth_matrix(m, "p2p_bidirectional_peer_off",
                                      "Peer copy bandwidth, both directions at once, peer access off",
                                      &peer_cell::bidir_off));
  {
    std::vector<std::vector<value>> lat(n);
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < n; ++j) {
        const auto& s = m.cells[i][j].latency_s;
        value v;
        if (s) v = s->median;
        lat[i].push_back(std::move(v));
      }
    table t = matrix_table("p2p_latency", fmt::format("Peer copy latency ({} copies, back to back, median)",
                                                      format_bytes(m.latency_bytes)),
                           lat, "us", 1e6, 2);
    t.notes.push_back(
        "- The time per copy when 100 small copies are queued back to back: the copy engine's fixed cost "
        "per copy, which dominates every transfer below a few hundred KiB.");
    r.tables.push_back(std::move(t));
  }
  nlohmann::json pj;
  pj["devices"] = devices;
  pj["bytes"] = m.bytes;
  pj["latency_bytes"] = m.latency_bytes;
  pj["can_access"] = m.can_access;
  pj["verified_bytes"] = verified;
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < n; ++j) {
      const auto& c = m.cells[i][j];
      const auto s = [](const std::optional<summary>& x) { return x ? nlohmann::json(*x) : nlohmann::json(nullptr); };
      pj["cells"].push_back({{"from", devices[i]}, {"to", devices[j]},
                             {"uni_peer_on_bytes_per_s", s(c.uni_on)}, {"uni_peer_off_bytes_per_s", s(c.uni_off)},
                             {"bidir_peer_on_bytes_per_s", s(c.bidir_on)}, {"bidir_peer_off_bytes_per_s", s(c.bidir_off)},
                             {"latency_s", s(c.latency_s)}});
    }
  r.extra["peer"] = pj;

  // ---- NCCL collectives -----------------------------------------------------------------------
  std::string why;
  auto nccl = nccl_collectives::open(devices, &why);
  if (!nccl) {
    spdlog::warn("{}", why);
    table t;
    t.id = "nccl";
    t.title = "NCCL collectives";
    t.columns = {{"status", "status"}};
    t.add_row({why});
    t.notes.push_back("- Without NCCL there are no collectives to measure; the peer-to-peer matrices above ran.");
    r.tables.push_back(std::move(t));
    r.extra["nccl"] = {{"status", why}};
    return;
  }
  const collective ops[] = {collective::all_reduce, collective::all_gather, collective::reduce_scatter};
  table t;
  t.id = "nccl";
  t.title = fmt::format("NCCL {} collectives on {} rank(s), float32 (median of {}; algbw = bytes / time, busbw as nccl-tests)",
                        nccl->version(), nccl->ranks(), iters);
  t.columns = {{"bytes", "size"}};
  for (auto op : ops) {
    const std::string k(to_string(op));
    t.columns.push_back({k + "_time_s", k + " (us)", 1e6, 1});
    t.columns.push_back({k + "_alg_bytes_per_s", "algbw GB/s", 1e-9, 2});
    t.columns.push_back({k + "_bus_bytes_per_s", "busbw GB/s", 1e-9, 2});
  }
  nlohmann::json rows = nlohmann::json::array();
  std::uint64_t checked = 0;
  for (std::uint64_t bytes : power_of_two_sweep(mg.nccl_min_bytes, mg.nccl_max_bytes)) {
    std::vector<value> row{format_bytes(bytes)};
    for (auto op : ops) {
      const auto c = nccl->run(op, bytes, warmup, iters);
      row.push_back(c.time_s.median);
      row.push_back(c.rate.alg_bytes_per_s);
      row.push_back(c.rate.bus_bytes_per_s);
      checked += c.verified_elements;
      rows.push_back({{"op", to_string(op)}, {"bytes", c.bytes}, {"ranks", c.ranks}, {"time_s", c.time_s},
                      {"alg_bytes_per_s", c.rate.alg_bytes_per_s}, {"bus_bytes_per_s", c.rate.bus_bytes_per_s},
                      {"verified_elements", c.verified_elements}});
    }
    t.add_row(std::move(row));
  }
  t.notes.push_back(
      "- algbw is the size over the time. busbw multiplies it by what each link must carry for that "
      "collective (nccl-tests: all-reduce 2(n-1)/n, all-gather and reduce-scatter (n-1)/n for n ranks), "
      "so it compares with the link's own bandwidth whatever the number of GPUs.");
  t.notes.push_back(fmt::format(
      "- Where a rank's input and output together fit in the {:.0f} MiB L2 cache the data can stay in "
      "cache between runs, and that size beats the larger ones; above it the rate settles at HBM speed.",
      static_cast<double>(ctx.devices[0].l2_cache_bytes) / 1048576.0));
  if (one)
    t.notes.push_back(
        "- With one rank nothing crosses a link (busbw 0): NCCL copies the buffer within the GPU, so the "
        "small sizes show NCCL's fixed cost per call and the large ones the GPU's copy bandwidth.");
  t.notes.push_back(fmt::format(
      "- Every collective's output was zeroed before each run and checked element by element after the "
      "last ({} elements): inputs are small integers in float32, so sums are exact. NVLink SHARP is "
      "kept off (NCCL_NVLS_ENABLE=0).",
      checked));
  r.extra["nccl"] = {{"version", nccl->version()}, {"ranks", nccl->ranks()}, {"results", rows}};
  r.tables.push_back(std::move(t));
}

}  // namespace gpu_basics::cli
