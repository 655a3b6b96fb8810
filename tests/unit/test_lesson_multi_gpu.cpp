// Tests of the multi_gpu lesson part: JSON round trip, notes computed from the result and the
// device facts, the GPU x GPU and NCCL tables, and the upgrade of schema-1 files.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/lessons/multi_gpu.hpp"
#include "lesson_test_util.hpp"

using namespace gpu_basics;
using namespace gpu_basics::lessons;

namespace {

summary spread(double median, std::size_t count) {
  return gpu_basics::testing::spread_around(median, count);
}

/// Two GPUs: 0 -> 1 has peer access, 1 -> 0 does not; the diagonal holds the in-GPU copies.
peer_result two_gpus() {
  peer_result p;
  p.devices = {2, 5};
  p.can_access = {{1, 1}, {0, 1}};
  p.bytes = 256ull << 20;
  p.latency_bytes = 4096;
  p.cells.assign(2, std::vector<peer_pair>(2));
  const double diag[] = {1.6e12, 1.55e12};
  for (std::size_t i = 0; i < 2; ++i)
    for (std::size_t j = 0; j < 2; ++j) {
      auto& c = p.cells[i][j];
      const double base = i == j ? diag[i] : 3.9e11 + 1.3e10 * static_cast<double>(i);
      c.uni_peer_on_bytes_per_s = spread(base, 20);
      if (i != j) {
        c.uni_peer_off_bytes_per_s = spread(base / 7.1, 20);
        c.bidir_peer_off_bytes_per_s = spread(base / 4.3, 20);
      }
      c.bidir_peer_on_bytes_per_s = spread(base * 1.87, 20);
      c.latency_s = spread(2.3e-6 + 1e-7 * static_cast<double>(2 * i + j), 20);
      c.verified_bytes = (1ull << 33) + 1000 * (2 * i + j);
    }
  p.verified_bytes = 4 * (1ull << 33) + 6000;
  return p;
}

nccl_result collectives(int ranks) {
  nccl_result n;
  n.version = "2.27.3";
  n.ranks = ranks;
  n.iterations = 17;
  n.ops = {"all_reduce", "all_gather", "reduce_scatter"};
  for (std::uint64_t bytes : {8ull, 1024ull, 64ull << 20}) {
    collective_size s;
    s.bytes = bytes;
    for (std::size_t k = 0; k < n.ops.size(); ++k) {
      collective_figure f;
      f.op = n.ops[k];
      f.bytes = bytes == 8 && k > 0 ? 0 : bytes;
      f.ranks = ranks;
      f.time_s =
          spread(1.1e-5 * static_cast<double>(k + 1) + static_cast<double>(bytes) * 1e-12, 17);
      f.alg_bytes_per_s = static_cast<double>(bytes) / f.time_s.median;
      f.bus_bytes_per_s = ranks == 1 ? 0.0 : f.alg_bytes_per_s * 0.5 * static_cast<double>(k + 1);
      f.verified_elements = bytes / 4 + k;
      s.ops.push_back(f);
    }
    n.sizes.push_back(s);
  }
  return n;
}

multi_gpu_result sample_result() {
  multi_gpu_result r;
  r.peer = two_gpus();
  r.nccl = collectives(2);
  return r;
}

device_facts h200_facts() {
  device_facts f;
  f.device.index = 2;
  f.device.name = "NVIDIA H200";
  f.device.l2_cache_bytes = 60ull << 20;
  f.link_bytes_per_s = 63.015e9;
  f.datasheet =
      gpu_datasheet{"H200", 4.8e12, 989e12, 989e12, 494e12, 67e12, "NVIDIA H200 datasheet"};
  return f;
}

std::string all_text(const std::vector<note>& notes, const std::string& table_id) {
  std::string s;
  for (const auto& n : notes)
    if (n.table_id == table_id) s += n.text + "\n";
  return s;
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

const presentation::table& table_named(const std::vector<presentation::table>& ts,
                                       const std::string& id) {
  for (const auto& t : ts)
    if (t.id == id) return t;
  throw std::out_of_range("no table " + id);
}

std::size_t column_of(const presentation::table& t, const std::string& key) {
  for (std::size_t i = 0; i < t.columns.size(); ++i)
    if (t.columns[i].key == key) return i;
  throw std::out_of_range("no column " + key);
}

nlohmann::json opt_json(const std::optional<summary>& s) {
  return s ? nlohmann::json(*s) : nlohmann::json(nullptr);
}

/// A schema-1 block as `gpu-basics transfer` wrote it: tables through presentation::to_json,
/// extra.peer and extra.nccl as add_multi_gpu built them.
nlohmann::json v1_block(const multi_gpu_result& r, bool with_extra) {
  nlohmann::json block = {{"tables", nlohmann::json::object()},
                          {"extra", nlohmann::json::object()}};
  for (const auto& t : present_multi_gpu(r)) block["tables"][t.id] = presentation::to_json(t);
  if (!with_extra) return block;
  const auto& p = r.peer;
  nlohmann::json pj;
  pj["devices"] = p.devices;
  pj["bytes"] = p.bytes;
  pj["latency_bytes"] = p.latency_bytes;
  pj["can_access"] = p.can_access;
  pj["verified_bytes"] = *p.verified_bytes;
  for (std::size_t i = 0; i < p.devices.size(); ++i)
    for (std::size_t j = 0; j < p.devices.size(); ++j) {
      const auto& c = p.cells[i][j];
      pj["cells"].push_back({{"from", p.devices[i]},
                             {"to", p.devices[j]},
                             {"uni_peer_on_bytes_per_s", opt_json(c.uni_peer_on_bytes_per_s)},
                             {"uni_peer_off_bytes_per_s", opt_json(c.uni_peer_off_bytes_per_s)},
                             {"bidir_peer_on_bytes_per_s", opt_json(c.bidir_peer_on_bytes_per_s)},
                             {"bidir_peer_off_bytes_per_s", opt_json(c.bidir_peer_off_bytes_per_s)},
                             {"latency_s", opt_json(c.latency_s)}});
    }
  block["extra"]["peer"] = pj;
  if (r.nccl && r.nccl->unavailable) {
    block["extra"]["nccl"] = {{"status", *r.nccl->unavailable}};
  } else if (r.nccl) {
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& s : r.nccl->sizes)
      for (const auto& f : s.ops)
        rows.push_back({{"op", f.op},
                        {"bytes", f.bytes},
                        {"ranks", f.ranks},
                        {"time_s", f.time_s},
                        {"alg_bytes_per_s", f.alg_bytes_per_s},
                        {"bus_bytes_per_s", f.bus_bytes_per_s},
                        {"verified_elements", *f.verified_elements}});
    block["extra"]["nccl"] = {
        {"version", r.nccl->version}, {"ranks", r.nccl->ranks}, {"results", rows}};
  }
  return block;
}

}  // namespace

TEST(LessonMultiGpu, RoundTripsThroughJson) {
  const auto r = sample_result();
  const nlohmann::json j = r;
  EXPECT_EQ(j.get<multi_gpu_result>(), r);
  EXPECT_EQ(nlohmann::json::parse(j.dump()).get<multi_gpu_result>(), r);
  multi_gpu_result off;
  off.peer = two_gpus();
  off.peer.verified_bytes.reset();
  off.nccl = nccl_result{};
  off.nccl->unavailable = "libnccl.so.2: cannot open shared object file";
  EXPECT_EQ(nlohmann::json::parse(nlohmann::json(off).dump()).get<multi_gpu_result>(), off);
  EXPECT_NE(nlohmann::json(off).get<multi_gpu_result>(), r);
}

TEST(LessonMultiGpu, DiagonalNoteComputesHbmShareFromTheDatasheet) {
  const auto r = sample_result();
  const auto f = h200_facts();
  const std::string text = all_text(explain_multi_gpu(r, f), "p2p_bandwidth");
  const double d = r.peer.cells[0][0].uni_peer_on_bytes_per_s->median;
  EXPECT_TRUE(
      has(text, fmt::format("{:.0f} GB/s copied, {:.0f} GB/s read + write (the HBM traffic, "
                            "{:.0f}% of the 4.80 TB/s datasheet)",
                            d * 1e-9, 2 * d * 1e-9, 100.0 * 2 * d / 4.8e12)))
      << text;
  EXPECT_TRUE(has(text, "67% of the 4.80 TB/s"));  // 3.2 / 4.8
  EXPECT_TRUE(has(text, fmt::format("this GPU's link: {:.1f} GB/s", 63.015)));
  const double fastest = std::max(r.peer.cells[0][1].uni_peer_on_bytes_per_s->median,
                                  r.peer.cells[1][0].uni_peer_on_bytes_per_s->median);
  EXPECT_TRUE(has(text, fmt::format("the fastest pair here: {:.0f} GB/s", fastest * 1e-9))) << text;
  EXPECT_FALSE(has(text, "450 GB/s"));
  EXPECT_TRUE(has(text, "checked after: 32.0 GiB verified"));  // 4 x 8 GiB + 6000 B
}

TEST(LessonMultiGpu, NotesSkipWhatTheResultDoesNotHold) {
  auto r = sample_result();
  r.peer.verified_bytes.reset();
  r.peer.cells[0][0].uni_peer_on_bytes_per_s.reset();
  r.nccl->sizes[1].ops[2].verified_elements.reset();
  const auto notes = explain_multi_gpu(r, device_facts{});
  EXPECT_TRUE(all_text(notes, "p2p_bandwidth").empty());
  const std::string nccl = all_text(notes, "nccl");
  EXPECT_FALSE(has(nccl, "checked element by element"));
  EXPECT_FALSE(has(nccl, "L2 cache"));  // no device facts
  EXPECT_TRUE(has(all_text(notes, "p2p_access"), "'yes': copies go straight"));
}

TEST(LessonMultiGpu, NcclNotesFollowRanksL2AndCheckedElements) {
  multi_gpu_result r;
  r.peer = two_gpus();
  r.nccl = collectives(1);
  const std::string text = all_text(explain_multi_gpu(r, h200_facts()), "nccl");
  std::uint64_t checked = 0;
  for (const auto& s : r.nccl->sizes)
    for (const auto& f : s.ops) checked += *f.verified_elements;
  EXPECT_TRUE(has(text, fmt::format("after the last ({} elements)", checked))) << text;
  EXPECT_TRUE(has(text, "fit in the 60 MiB L2 cache"));
  EXPECT_TRUE(has(text, "With one rank nothing crosses a link, so there is no bus bandwidth"));
  EXPECT_FALSE(has(text, "busbw multiplies it"));  // nothing of a link to explain
  r.nccl = collectives(4);
  const std::string four = all_text(explain_multi_gpu(r, h200_facts()), "nccl");
  EXPECT_FALSE(has(four, "With one rank"));
  EXPECT_TRUE(has(four, "busbw multiplies it"));
  r.nccl->unavailable = "NCCL not found";
  EXPECT_TRUE(has(all_text(explain_multi_gpu(r, h200_facts()), "nccl"), "Without NCCL"));
}

TEST(LessonMultiGpu, OneGpuSaysEveryMatrixIsOneCell) {
  multi_gpu_result r;
  r.peer.devices = {0};
  r.peer.can_access = {{1}};
  r.peer.cells = {{peer_pair{}}};
  r.peer.cells[0][0].uni_peer_on_bytes_per_s = spread(1.7e12, 5);
  const auto notes = explain_multi_gpu(r, h200_facts());
  EXPECT_TRUE(has(all_text(notes, "p2p_access"), "One GPU visible"));
  EXPECT_FALSE(has(all_text(notes, "p2p_bandwidth"), "fastest pair"));
  // Peer access off is the same copy within the GPU: one line says so, no matrix repeats it.
  EXPECT_TRUE(has(all_text(notes, "p2p_bandwidth"),
                  "With one GPU there is no peer: a copy within the GPU never goes through the "
                  "host"));
  const std::string both = all_text(notes, "p2p_bidirectional");
  EXPECT_TRUE(has(both, "within one GPU")) << both;
  EXPECT_FALSE(has(both, "full duplex")) << both;
  std::vector<std::string> ids;
  for (const auto& t : present_multi_gpu(r)) {
    ids.push_back(t.id);
    EXPECT_FALSE(has(t.title, "through the host")) << t.title;
  }
  EXPECT_EQ(ids, (std::vector<std::string>{"p2p_access", "p2p_bandwidth", "p2p_bidirectional",
                                           "p2p_latency"}));
}

TEST(LessonMultiGpu, OneRankShowsNoBusBandwidth) {
  multi_gpu_result r;
  r.peer.devices = {0};
  r.peer.can_access = {{1}};
  r.peer.cells = {{peer_pair{}}};
  r.nccl = collectives(1);
  const auto one_rank = present_multi_gpu(r);
  const auto& one = table_named(one_rank, "nccl");
  EXPECT_EQ(one.title,
            "NCCL 2.27.3 collectives on 1 rank, float32 (median of 17; algbw = bytes / time)");
  EXPECT_EQ(one.columns.size(), 7u);  // size, then time and algbw per collective
  // Sampled by the stopping rule: the title says how many runs the medians took.
  auto sampled = r;
  for (auto& size : sampled.nccl->sizes)
    for (auto& c : size.ops) c.sampling = sampling_outcome{20, 0.01, stop_reason::max_samples, 0.1};
  sampled.nccl->sizes[1].ops[2].sampling->samples = 16;
  EXPECT_EQ(table_named(present_multi_gpu(sampled), "nccl").title,
            "NCCL 2.27.3 collectives on 1 rank, float32 (median of 16 to 20; algbw = bytes / "
            "time)");
  sampled.nccl->sizes[1].ops[2].sampling->samples = 20;
  EXPECT_TRUE(has(table_named(present_multi_gpu(sampled), "nccl").title, "(median of 20;"));
  for (const auto& c : one.columns) EXPECT_FALSE(has(c.key, "_bus_")) << c.key;
  EXPECT_DOUBLE_EQ(std::get<double>(one.rows[2][column_of(one, "all_gather_alg_bytes_per_s")]),
                   r.nccl->sizes[2].ops[1].alg_bytes_per_s);
  r.nccl = collectives(2);
  const auto two_ranks = present_multi_gpu(r);
  const auto& two = table_named(two_ranks, "nccl");
  EXPECT_EQ(two.columns.size(), 10u);
  EXPECT_NO_THROW((void)column_of(two, "all_reduce_bus_bytes_per_s"));
}

TEST(LessonMultiGpu, PresentsTheMatricesAndTheCollectives) {
  const auto r = sample_result();
  const auto tables = present_multi_gpu(r);
  std::vector<std::string> ids;
  for (const auto& t : tables) ids.push_back(t.id);
  EXPECT_EQ(ids, (std::vector<std::string>{"p2p_access", "p2p_bandwidth", "p2p_bandwidth_peer_off",
                                           "p2p_bidirectional", "p2p_bidirectional_peer_off",
                                           "p2p_latency", "nccl"}));
  const auto& access = table_named(tables, "p2p_access");
  ASSERT_EQ(access.rows.size(), 2u);
  EXPECT_EQ(std::get<std::string>(access.rows[0][column_of(access, "to_gpu_0")]), "self");
  EXPECT_EQ(std::get<std::string>(access.rows[0][column_of(access, "to_gpu_1")]), "yes");
  EXPECT_EQ(std::get<std::string>(access.rows[1][column_of(access, "to_gpu_0")]), "no");
  const auto& bw = table_named(tables, "p2p_bandwidth");
  EXPECT_EQ(bw.title,
            "Peer copy bandwidth, one direction, peer access on (256 MiB per copy, median)");
  EXPECT_EQ(bw.columns[2].header, "GPU 1 (GB/s copied)");
  EXPECT_DOUBLE_EQ(std::get<double>(bw.rows[1][column_of(bw, "to_gpu_0")]),
                   r.peer.cells[1][0].uni_peer_on_bytes_per_s->median);
  const auto& off = table_named(tables, "p2p_bandwidth_peer_off");
  EXPECT_EQ(off.title,
            "Peer copy bandwidth, one direction, peer access off (between GPUs, staged through "
            "the host)");
  EXPECT_TRUE(
      has(all_text(explain_multi_gpu(r, h200_facts()), "p2p_bidirectional"), "full duplex"));
  EXPECT_TRUE(std::holds_alternative<std::monostate>(off.rows[0][column_of(off, "to_gpu_0")]));
  const auto& lat = table_named(tables, "p2p_latency");
  EXPECT_EQ(lat.title, "Peer copy latency (4 KiB copies, back to back, median)");
  EXPECT_DOUBLE_EQ(std::get<double>(lat.rows[0][2]), r.peer.cells[0][1].latency_s->median);
  const auto& n = table_named(tables, "nccl");
  EXPECT_EQ(n.title,
            "NCCL 2.27.3 collectives on 2 rank(s), float32 (median of 17; algbw = bytes / time, "
            "busbw as nccl-tests)");
  EXPECT_EQ(n.columns.size(), 10u);
  EXPECT_EQ(n.columns[4].key, "all_gather_time_s");
  ASSERT_EQ(n.rows.size(), 3u);
  EXPECT_EQ(std::get<std::string>(n.rows[2][0]), "64 MiB");
  EXPECT_DOUBLE_EQ(std::get<double>(n.rows[2][column_of(n, "reduce_scatter_bus_bytes_per_s")]),
                   r.nccl->sizes[2].ops[2].bus_bytes_per_s);
}

TEST(LessonMultiGpu, PresentsNcclUnavailableAsAStatusRow) {
  auto r = sample_result();
  r.nccl = nccl_result{};
  r.nccl->unavailable = "libnccl.so.2 not found";
  const auto tables = present_multi_gpu(r);
  const auto& t = table_named(tables, "nccl");
  ASSERT_EQ(t.columns.size(), 1u);
  EXPECT_EQ(t.columns[0].key, "status");
  EXPECT_EQ(std::get<std::string>(t.rows.at(0)[0]), "libnccl.so.2 not found");
}

TEST(LessonMultiGpu, FromV1RebuildsTheMatricesFromTheirTables) {
  const auto r = sample_result();
  const auto back = multi_gpu_from_v1(v1_block(r, false));
  ASSERT_TRUE(back);
  const auto& p = back->peer;
  EXPECT_EQ(p.devices, (std::vector<int>{0, 1}));  // the tables number GPUs by position
  EXPECT_EQ(p.can_access, r.peer.can_access);
  EXPECT_EQ(p.bytes, 256ull << 20);
  EXPECT_EQ(p.latency_bytes, 4096u);
  EXPECT_FALSE(p.verified_bytes);
  ASSERT_EQ(p.cells.size(), 2u);
  ASSERT_TRUE(p.cells[1][0].bidir_peer_on_bytes_per_s);
  EXPECT_DOUBLE_EQ(p.cells[1][0].bidir_peer_on_bytes_per_s->median,
                   r.peer.cells[1][0].bidir_peer_on_bytes_per_s->median);
  EXPECT_EQ(p.cells[1][0].bidir_peer_on_bytes_per_s->count, 0u);  // only the median was kept
  EXPECT_FALSE(p.cells[1][1].uni_peer_off_bytes_per_s);
  EXPECT_DOUBLE_EQ(p.cells[0][1].latency_s->median, r.peer.cells[0][1].latency_s->median);
  ASSERT_TRUE(back->nccl);
  EXPECT_EQ(back->nccl->version, "2.27.3");
  EXPECT_EQ(back->nccl->ranks, 2);
  EXPECT_EQ(back->nccl->iterations, 17);
  EXPECT_EQ(back->nccl->ops, r.nccl->ops);
  ASSERT_EQ(back->nccl->sizes.size(), 3u);
  EXPECT_EQ(back->nccl->sizes[2].bytes, 64ull << 20);
  EXPECT_DOUBLE_EQ(back->nccl->sizes[1].ops[0].time_s.median,
                   r.nccl->sizes[1].ops[0].time_s.median);
  EXPECT_FALSE(back->nccl->sizes[1].ops[0].verified_elements);
  // The tables render again as schema 1 held them.
  const auto again = present_multi_gpu(*back), want = present_multi_gpu(r);
  ASSERT_EQ(again.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i)
    EXPECT_EQ(presentation::to_json(again[i]), presentation::to_json(want[i])) << want[i].id;
}

TEST(LessonMultiGpu, FromV1TakesTheFullFiguresFromExtra) {
  const auto r = sample_result();
  const auto back = multi_gpu_from_v1(v1_block(r, true));
  ASSERT_TRUE(back);
  auto want = r;  // schema 1 kept the verified bytes over all cells only
  for (auto& row : want.peer.cells)
    for (auto& c : row) c.verified_bytes = 0;
  EXPECT_EQ(*back, want);
  EXPECT_NE(*back, r);
}

TEST(LessonMultiGpu, FromV1KeepsNcclUnavailable) {
  auto r = sample_result();
  r.nccl = nccl_result{};
  r.nccl->unavailable = "NCCL could not start: unhandled system error";
  const auto back = multi_gpu_from_v1(v1_block(r, true));
  ASSERT_TRUE(back && back->nccl);
  EXPECT_EQ(back->nccl->unavailable, r.nccl->unavailable);
  EXPECT_TRUE(back->nccl->sizes.empty());
}

TEST(LessonMultiGpu, FromV1WithoutItsTablesIsNothing) {
  const nlohmann::json block = {{"tables", {{"double_buffer", nlohmann::json::object()}}},
                                {"extra", nlohmann::json::object()}};
  EXPECT_FALSE(multi_gpu_from_v1(block));
}

TEST(LessonMultiGpu, FromV1ThrowsOnMalformedBlocks) {
  const auto r = sample_result();
  auto not_square = v1_block(r, false);
  not_square["tables"]["p2p_bandwidth"]["rows"].erase(1);
  EXPECT_THROW((void)multi_gpu_from_v1(not_square), format_error);
  auto bad_access = v1_block(r, false);
  bad_access["tables"]["p2p_access"]["rows"][0]["to_gpu_1"] = "maybe";
  EXPECT_THROW((void)multi_gpu_from_v1(bad_access), format_error);
  auto bad_cell = v1_block(r, false);
  bad_cell["tables"]["p2p_latency"]["rows"][1]["to_gpu_0"] = "fast";
  gpu_basics::testing::expect_path_error([&] { (void)multi_gpu_from_v1(bad_cell); },
                                         "tables.p2p_latency.rows[1].to_gpu_0",
                                         "expected a number, got \"fast\"");
  auto bad_title = v1_block(r, false);
  bad_title["tables"]["nccl"]["title"] = "NCCL";
  EXPECT_THROW((void)multi_gpu_from_v1(bad_title), format_error);
  auto short_results = v1_block(r, true);
  short_results["extra"]["nccl"]["results"].erase(0);
  EXPECT_ANY_THROW((void)multi_gpu_from_v1(short_results));
  auto wrong_devices = v1_block(r, true);
  wrong_devices["extra"]["peer"]["devices"] = {0, 1, 2};
  EXPECT_THROW((void)multi_gpu_from_v1(wrong_devices), format_error);
  gpu_basics::testing::expect_path_error([] { (void)multi_gpu_from_v1(nlohmann::json("tables")); },
                                         "", "expected an object, got \"tables\"");
}
