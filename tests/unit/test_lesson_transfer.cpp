// Tests of the transfer lesson (written with it): the result's JSON, the notes' figures, the
// tables, and the upgrade of schema-1 files. CPU only: results are built by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include <fmt/format.h>

#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/hardware.hpp"
#include "gpu_basics/core/units.hpp"
#include "gpu_basics/lessons/transfer.hpp"
#include "lesson_test_util.hpp"

using namespace gpu_basics;
using namespace gpu_basics::lessons;

namespace {

constexpr std::uint64_t KiB = 1024, MiB = KiB * 1024, GiB = MiB * 1024;

summary around(double median, std::size_t count = 20) {
  return gpu_basics::testing::spread_around(median, count);
}

copy_figure fig(const std::string& dir, const std::string& mem, std::uint64_t bytes, double rate,
                unsigned streams = 1) {
  copy_figure f;
  f.direction = dir;
  f.memory = mem;
  f.bytes = f.bytes_moved = bytes;
  f.streams = streams;
  const double t = static_cast<double>(bytes) / rate;
  f.seconds = {t, t * 1.02, t * 0.99};
  f.time_s = around(t);
  f.bandwidth_bytes_per_s = around(rate);
  f.verified_bytes = bytes * 23;
  return f;
}

shape_copies shape(const std::string& label, std::uint64_t bytes, double scale) {
  return {
      label,
      bytes,
      {fig("H2D", "pinned", bytes, 52.1e9 * scale), fig("H2D", "pageable", bytes, 9.3e9 * scale),
       fig("D2H", "pinned", bytes, 54.7e9 * scale), fig("D2H", "pageable", bytes, 13.9e9 * scale)}};
}

/// A full result; `large` is transfer.large_copy_bytes (equal to a tensor's size in one test,
/// so that measurements of the same kind and size must be told apart by their order).
transfer_result sample(std::uint64_t large = GiB) {
  transfer_result r;
  r.iterations = 20;
  r.warmup_iterations = 3;
  r.use_pinned_memory = true;
  r.copy_engines = 3;
  r.link_bytes_per_s = 63.015e9;
  r.hbm_bytes_per_s = 4.8e12;
  r.shapes = {shape("[1024, 1024] float32", 4 * MiB, 0.8),
              shape("[4096, 4096] float32", 64 * MiB, 1.0)};
  r.d2d = {fig("D2D", "pinned", 4 * MiB, 1.31e12), fig("D2D", "pinned", 64 * MiB, 2.07e12)};
  r.sync_async = {{"pinned", large, around(0.0195), around(7.5e-6), around(0.0193), around(0.0192)},
                  {"pageable", large, around(0.161), around(0.149), around(0.158), around(0.009)}};
  streams_figures s;
  s.bytes = 64 * MiB;
  s.requested_streams = 8;
  s.directions = {
      {fig("H2D", "pinned", 64 * MiB, 52.5e9), fig("H2D", "pinned", 64 * MiB, 51.8e9, 8)},
      {fig("D2H", "pinned", 64 * MiB, 54.6e9), fig("D2H", "pinned", 64 * MiB, 53.9e9, 5)}};
  s.bidirectional = fig("H2D", "pinned", 64 * MiB, 98.4e9, 2);
  s.bidirectional->bidirectional = true;
  s.bidirectional->bytes_moved = 128 * MiB;
  s.bidirectional->seconds_joint = {0.0013, 0.00131};
  r.streams = s;
  staging_figures st;
  st.bytes = large;
  st.chunk_bytes = 8 * MiB;
  st.buffers = 3;
  st.threads = 16;
  st.pieces_per_thread = 4;
  st.enqueue_while_copying = true;
  st.plain_up = fig("H2D", "pageable", large, 6.2e9);
  st.staged_up = fig("H2D", "pageable", large, 24.3e9);
  st.ring_memcpy = fig("H2D", "pageable", large, 31.6e9, 0);
  st.dram_memcpy = fig("H2D", "pageable", large, 17.4e9, 0);
  st.pinned_up = fig("H2D", "pinned", large, 55.4e9);
  st.plain_down = fig("D2H", "pageable", large, 13.9e9);
  st.staged_down = fig("D2H", "pageable", large, 21.7e9);
  r.pageable_upload = st;
  r.host_register = host_register_figures{large, around(0.212), around(0.087),
                                          fig("H2D", "pinned", large, 55.1e9)};
  // The staged upload loses at 4 KiB and wins from 8 KiB on.
  r.sweep = std::vector<sweep_point>{
      {4 * KiB, fig("H2D", "pinned", 4 * KiB, 1.1e9), fig("D2H", "pinned", 4 * KiB, 1.3e9),
       fig("H2D", "pageable", 4 * KiB, 0.6e9), fig("D2H", "pageable", 4 * KiB, 0.5e9),
       fig("H2D", "pinned", 4 * KiB, 0.3e9), fig("D2H", "pinned", 4 * KiB, 0.2e9)},
      {8 * KiB, fig("H2D", "pinned", 8 * KiB, 2.0e9), fig("D2H", "pinned", 8 * KiB, 2.4e9),
       fig("H2D", "pageable", 8 * KiB, 1.1e9), fig("D2H", "pageable", 8 * KiB, 0.9e9),
       fig("H2D", "pinned", 8 * KiB, 1.5e9), fig("D2H", "pinned", 8 * KiB, 1.2e9)},
      {16 * KiB, fig("H2D", "pinned", 16 * KiB, 3.7e9), fig("D2H", "pinned", 16 * KiB, 4.1e9),
       fig("H2D", "pageable", 16 * KiB, 1.9e9), fig("D2H", "pageable", 16 * KiB, 1.6e9),
       fig("H2D", "pinned", 16 * KiB, 3.0e9), fig("D2H", "pinned", 16 * KiB, 2.6e9)}};
  return r;
}

device_facts h200_facts() {
  device_info d;
  d.name = "NVIDIA H200";
  d.copy_engines = 3;
  d.l2_cache_bytes = 60 * MiB;
  d.pcie_generation_max = 5;
  d.pcie_width_max = 16;
  return device_facts::of(d, "ok");
}

std::vector<std::string> notes_of(const std::vector<note>& notes, const std::string& id) {
  std::vector<std::string> out;
  for (const auto& n : notes)
    if (n.table_id == id) out.push_back(n.text);
  return out;
}

/// The one note of table `id` that contains `needle`.
std::string note_with(const std::vector<note>& notes, const std::string& id,
                      const std::string& needle) {
  for (const auto& t : notes_of(notes, id))
    if (t.find(needle) != std::string::npos) return t;
  ADD_FAILURE() << "no note of " << id << " contains '" << needle << "'";
  return {};
}

const presentation::table& table_named(const std::vector<presentation::table>& ts,
                                       const std::string& id) {
  for (const auto& t : ts)
    if (t.id == id) return t;
  throw std::out_of_range("no table " + id);
}

std::vector<std::string> keys_of(const presentation::table& t) {
  std::vector<std::string> k;
  for (const auto& c : t.columns) k.push_back(c.key);
  return k;
}

double cell(const presentation::table& t, std::size_t row, std::size_t col) {
  return std::get<double>(t.rows.at(row).at(col));
}

// ---- schema 1, written as the old `gpu-basics transfer` wrote it ------------------------------

/// measurement_json of the old lesson: the keys it wrote for each copy.
nlohmann::json old_measurement_full(const copy_figure& f) {
  return {{"direction", f.direction},
          {"memory", f.memory},
          {"bytes", f.bytes},
          {"bytes_moved", f.bytes_moved},
          {"streams", f.streams},
          {"bidirectional", f.bidirectional},
          {"seconds", f.seconds},
          {"seconds_joint", f.seconds_joint},
          {"time_s", f.time_s},
          {"bandwidth_bytes_per_s", f.bandwidth_bytes_per_s},
          {"verified_bytes", f.verified_bytes}};
}

/// extra.measurements in the order the old lesson pushed them.
nlohmann::json old_measurements(const transfer_result& r) {
  nlohmann::json raw = nlohmann::json::array();
  const auto push = [&](const copy_figure& f) { raw.push_back(old_measurement_full(f)); };
  for (const auto& s : r.shapes)
    for (const auto& c : s.copies) push(c);
  for (const auto& c : r.d2d) push(c);
  for (const auto& d : r.streams->directions) push(d.one), push(d.many);
  push(*r.streams->bidirectional);
  const auto& st = *r.pageable_upload;
  for (const auto* f : {&st.plain_up, &st.staged_up, &st.ring_memcpy, &st.dram_memcpy}) push(*f);
  push(*st.pinned_up);
  push(st.plain_down);
  push(st.staged_down);
  for (const auto& p : *r.sweep) push(*p.h2d_pinned), push(*p.d2h_pinned), push(p.h2d_pageable);
  return raw;
}

/// A schema-1 block of `r`: its tables as presentation::to_json wrote them (with the old
/// num_streams note where it applied), and the old extra keys.
nlohmann::json v1_block(const transfer_result& r) {
  nlohmann::json tables = nlohmann::json::object();
  auto ts = present_transfer(r);
  attach_notes(ts, explain_transfer(r, h200_facts()));
  for (const auto& t : ts) tables[t.id] = presentation::to_json(t);
  nlohmann::json extra = nlohmann::json::object();
  extra["measurements"] = old_measurements(r);
  for (const auto& sa : r.sync_async)
    extra["sync_async"].push_back({{"memory", sa.memory},
                                   {"bytes", sa.bytes},
                                   {"sync_call_s", sa.sync_call_s},
                                   {"async_call_s", sa.async_call_s},
                                   {"async_copy_s", sa.async_copy_s},
                                   {"async_free_s", sa.async_free_s}});
  const auto& h = *r.host_register;
  extra["host_register"] = {{"bytes", h.bytes},
                            {"register_s", h.register_s},
                            {"unregister_s", h.unregister_s},
                            {"registered_copy", old_measurement_full(h.registered_copy)},
                            {"break_even_uploads", 3.0}};
  return {{"tables", tables}, {"extra", extra}};
}

}  // namespace

// ---- JSON
// -----------------------------------------------------------------------------------------

TEST(LessonTransfer, ResultRoundTripsThroughJson) {
  transfer_result r = sample();
  double_buffer_result db;
  db.batch_bytes = 64 * MiB;
  db.batches = 32;
  db.depth = 2;
  db.copy_s = 0.00121;
  r.double_buffer = db;
  multi_gpu_result mg;
  mg.peer.devices = {0, 1};
  mg.peer.bytes = 256 * MiB;
  r.multi_gpu = mg;

  const nlohmann::json j = r;
  EXPECT_EQ(j.get<transfer_result>(), r);
  EXPECT_EQ(nlohmann::json::parse(j.dump()).get<transfer_result>(), r);
  EXPECT_EQ(j.at("double_buffer").at("batches"), 32);
  EXPECT_EQ(j.at("shapes").at(1).at("copies").at(2).at("direction"), "D2H");

  // Absent parts are null and stay absent.
  transfer_result bare = sample();
  bare.streams.reset();
  bare.sweep.reset();
  bare.link_bytes_per_s.reset();
  const nlohmann::json jb = bare;
  EXPECT_TRUE(jb.at("sweep").is_null());
  EXPECT_EQ(nlohmann::json::parse(jb.dump()).get<transfer_result>(), bare);
}

// ---- explain
// --------------------------------------------------------------------------------------

TEST(LessonTransfer, ExplainComputesItsFiguresFromTheResult) {
  const transfer_result r = sample();
  const device_facts facts = h200_facts();
  const auto notes = explain_transfer(r, facts);

  // Pinned over pageable H2D at the last tensor.
  const auto& last = r.shapes.back().copies;
  const double x = last[0].bandwidth_bytes_per_s.median / last[1].bandwidth_bytes_per_s.median;
  EXPECT_NE(note_with(notes, "bandwidth", fmt::format("pinned H2D is {:.1f}x faster", x)), "");

  // The link note: the best pinned copy's share of the link (D2H 64 MiB here), computed.
  const double best = 54.7e9;
  const std::string link = note_with(notes, "bandwidth", "The link: PCIe Gen5 x16");
  EXPECT_NE(link.find(fmt::format("{:.1f} GB/s per direction", *r.link_bytes_per_s / 1e9)),
            std::string::npos);
  EXPECT_NE(link.find(fmt::format("reached up to {:.0f}% of it here (D2H of 64 MiB)",
                                  100 * best / *r.link_bytes_per_s)),
            std::string::npos)
      << link;
  EXPECT_NE(link.find(fmt::format("at most {:.0f}%", 100.0 * 256 / (256 + 24))), std::string::npos)
      << link;

  // Device copies against the datasheet (read + write, best size).
  const double hbm = facts.datasheet->hbm_bytes_per_s;
  EXPECT_NE(note_with(notes, "d2d",
                      fmt::format("reached {:.0f}% of it (read + write, 64 MiB)",
                                  100 * 2 * 2.07e12 / hbm)),
            "");
  EXPECT_NE(note_with(notes, "d2d", "60 MiB L2"), "");

  // The staged upload against its ceiling.
  const auto& st = *r.pageable_upload;
  // Its ceiling: the slower of the two stages, here the threads' memcpy (31.6 < 55.4 GB/s).
  EXPECT_NE(note_with(notes, "pageable_upload",
                      fmt::format("here the threads' memcpy at 31.6 GB/s: the staged upload "
                                  "reached {:.0f}% of it",
                                  100 * 24.3e9 / 31.6e9)),
            "");
  EXPECT_NE(note_with(notes, "pageable_upload", "the upload from pinned memory (55.4 GB/s)"), "");
  EXPECT_NE(note_with(notes, "pageable_upload", fmt::format("runs at {:.1f} GB/s", 17.4)), "");

  // cudaHostRegister's break-even.
  const double cost = r.host_register->register_s.median + r.host_register->unregister_s.median;
  const double saving = st.plain_up.time_s.median - r.host_register->registered_copy.time_s.median;
  const std::string reg = note_with(notes, "host_register", "Registering costs");
  EXPECT_NE(reg.find(fmt::format("costs {:.0f} ms", cost * 1e3)), std::string::npos) << reg;
  EXPECT_NE(reg.find(fmt::format("after {} upload(s)", static_cast<int>(std::ceil(cost / saving)))),
            std::string::npos)
      << reg;
  const double vs_staged =
      st.staged_up.time_s.median - r.host_register->registered_copy.time_s.median;
  EXPECT_NE(
      reg.find(fmt::format("it pays after {}.", static_cast<int>(std::ceil(cost / vs_staged)))),
      std::string::npos)
      << reg;

  // Both directions at once against one H2D stream; fewer D2H streams than asked for.
  const double both = 98.4e9 / 52.5e9;
  EXPECT_NE(note_with(notes, "streams", fmt::format("together they moved {:.2f}x", both)), "");
  EXPECT_NE(note_with(notes, "streams",
                      "transfer.num_streams is 8, but a 64 MiB copy splits into at most 5 chunks"),
            "");
  EXPECT_EQ(notes_of(notes, "streams").size(), 3u);  // the H2D split used all 8

  // Sync vs async: the pinned call's time and the pageable call's share of the copy.
  EXPECT_NE(note_with(notes, "sync_async", fmt::format("({:.1f} us here", 7.5)), "");
  EXPECT_NE(
      note_with(notes, "sync_async", fmt::format("({:.0f}% of it here)", 100 * 0.149 / 0.158)), "");

  // The sweep's smallest pinned copy.
  const auto& p0 = r.sweep->front();
  EXPECT_NE(note_with(notes, "sweep",
                      fmt::format("{:.1f} us for 4 KiB here", p0.h2d_pinned->time_s.median * 1e6)),
            "");
  // Where the staged upload starts to beat cudaMemcpy from pageable memory (8 KiB in the sample),
  // and the note changes when it never does.
  EXPECT_NE(note_with(notes, "sweep", "beats cudaMemcpy from pageable memory from 8 KiB on"), "");
  transfer_result slow = sample();
  for (auto& p : *slow.sweep) p.h2d_staged->bandwidth_bytes_per_s.median = 1e6;
  EXPECT_NE(note_with(explain_transfer(slow, h200_facts()), "sweep", "never beats"), "");
}

TEST(LessonTransfer, ExplainStatesNoFixedShares) {
  const auto notes = explain_transfer(sample(), h200_facts());
  for (const auto& n : notes) {
    EXPECT_EQ(n.text.find("~88%"), std::string::npos) << n.text;
    EXPECT_EQ(n.text.find("85-90%"), std::string::npos) << n.text;
    EXPECT_EQ(n.text.find("75-80%"), std::string::npos) << n.text;
  }
}

TEST(LessonTransfer, EveryNoteNamesOneOfTheTables) {
  const transfer_result r = sample();
  std::set<std::string> ids;
  for (const auto& t : present_transfer(r)) ids.insert(t.id);
  const auto notes = explain_transfer(r, h200_facts());
  EXPECT_GE(notes.size(), 15u);
  for (const auto& n : notes) EXPECT_TRUE(ids.count(n.table_id)) << n.table_id << ": " << n.text;
}

TEST(LessonTransfer, ExplainSkipsNotesWhoseInputsAreMissing) {
  transfer_result r;
  r.shapes = {shape("[8, 8] float32", 256, 1.0)};
  r.shapes[0].copies.erase(r.shapes[0].copies.begin() + 1);  // no pageable H2D
  const auto notes = explain_transfer(r, device_facts{});    // no link, no datasheet
  for (const auto& n : notes) EXPECT_EQ(n.table_id, "bandwidth");
  for (const auto& n : notes) {
    EXPECT_EQ(n.text.find("The link"), std::string::npos);
    EXPECT_EQ(n.text.find("faster than pageable"), std::string::npos);
  }
  EXPECT_EQ(present_transfer(r).size(), 1u);
}

TEST(LessonTransfer, ExplainSaysWhenPinningNeverPays) {
  transfer_result r = sample();
  // A registered upload slower than the staged one: no break-even against it.
  r.host_register->registered_copy.time_s.median = r.pageable_upload->staged_up.time_s.median * 2;
  const auto notes = explain_transfer(r, h200_facts());
  const std::string reg = note_with(notes, "host_register", "Registering costs");
  EXPECT_NE(reg.find("Against the staged copy it pays never: a registered upload is not faster."),
            std::string::npos)
      << reg;
  EXPECT_NE(reg.find("it has paid for itself after "), std::string::npos) << reg;
}

TEST(LessonTransfer, TheStagedUploadIsMeasuredAgainstItsSlowerStage) {
  transfer_result r = sample();
  auto& st = *r.pageable_upload;
  // Threads faster than the DMA: the upload from pinned memory bounds it.
  st.ring_memcpy = fig("H2D", "pageable", GiB, 73.5e9, 0);
  st.staged_up = fig("H2D", "pageable", GiB, 52.2e9);
  auto notes = explain_transfer(r, h200_facts());
  EXPECT_NE(note_with(notes, "pageable_upload",
                      fmt::format("here the DMA at 55.4 GB/s: the staged upload reached {:.0f}% "
                                  "of it",
                                  100 * 52.2 / 55.4)),
            "");
  // Without a pinned figure the DMA's ceiling is the link, still under the threads' 73.5 GB/s.
  st.pinned_up.reset();
  notes = explain_transfer(r, h200_facts());
  const double link = *r.link_bytes_per_s;
  const std::string n = note_with(notes, "pageable_upload", "the DMA's is the PCIe link");
  EXPECT_NE(n.find(fmt::format("here the DMA at {:.1f} GB/s: the staged upload reached {:.0f}%",
                               link / 1e9, 100 * 52.2e9 / link)),
            std::string::npos)
      << n;
}

TEST(LessonTransfer, TheStagedUploadsBoundSaysOnlyWhatWasMeasured) {
  const auto upload_note = [](const transfer_result& r, device_facts facts) {
    return note_with(explain_transfer(r, facts), "pageable_upload", "The staged upload is");
  };
  transfer_result r = sample();
  auto& st = *r.pageable_upload;
  // A pinned upload above the link's nominal rate (a host link that is not PCIe): the note does
  // not call it under the link, and the DMA is still the slower stage.
  st.ring_memcpy = fig("H2D", "pageable", GiB, 400e9, 0);
  st.pinned_up = fig("H2D", "pinned", GiB, 300e9);
  std::string n = upload_note(r, h200_facts());
  EXPECT_EQ(n.find("under the PCIe link"), std::string::npos) << n;
  EXPECT_NE(n.find("here the DMA at 300.0 GB/s"), std::string::npos) << n;

  // No link and no pinned figure: only the threads' stage was measured, and the note says so.
  r = sample();
  r.link_bytes_per_s.reset();
  r.pageable_upload->pinned_up.reset();
  device_facts no_link = h200_facts();
  no_link.link_bytes_per_s.reset();
  n = upload_note(r, no_link);
  EXPECT_EQ(n.find("DMA's"), std::string::npos) << n;
  EXPECT_NE(n.find(fmt::format("Of the two stages only one was measured, the threads' memcpy at "
                               "31.6 GB/s: the staged upload reached {:.0f}% of it",
                               100 * 24.3 / 31.6)),
            std::string::npos)
      << n;

  // No ring figure: the DMA's known ceiling still bounds it, and no 0.0 GB/s threads' ceiling.
  r = sample();
  r.pageable_upload->ring_memcpy = copy_figure{};
  n = upload_note(r, h200_facts());
  EXPECT_EQ(n.find("threads' ceiling"), std::string::npos) << n;
  EXPECT_NE(n.find(fmt::format("only one was measured, the DMA at 55.4 GB/s: the staged upload "
                               "reached {:.0f}% of it",
                               100 * 24.3 / 55.4)),
            std::string::npos)
      << n;

  // Neither stage measured: no bound at all.
  r.link_bytes_per_s.reset();
  r.pageable_upload->pinned_up.reset();
  n = upload_note(r, no_link);
  EXPECT_EQ(n.find("reached"), std::string::npos) << n;
  EXPECT_NE(n.find("must come from DRAM."), std::string::npos) << n;
}

// ---- present
// --------------------------------------------------------------------------------------

TEST(LessonTransfer, PresentKeepsTheTablesOfBefore) {
  const transfer_result r = sample();
  const auto ts = present_transfer(r);
  std::vector<std::string> ids;
  for (const auto& t : ts) ids.push_back(t.id);
  EXPECT_EQ(ids, (std::vector<std::string>{"bandwidth", "d2d", "sync_async", "streams",
                                           "pageable_upload", "host_register", "sweep"}));

  const auto& bw = table_named(ts, "bandwidth");
  EXPECT_EQ(keys_of(bw),
            (std::vector<std::string>{"shape", "bytes", "direction", "memory", "median_bytes_per_s",
                                      "min_bytes_per_s", "max_bytes_per_s", "rel_spread",
                                      "link_percent", "median_time_s"}));
  EXPECT_EQ(bw.columns[1].header, "MiB");
  ASSERT_EQ(bw.rows.size(), 8u);
  const auto& c = r.shapes[1].copies[2];  // D2H pinned, 64 MiB
  EXPECT_EQ(std::get<std::string>(bw.rows[6][0]), "[4096, 4096] float32");
  EXPECT_EQ(std::get<std::int64_t>(bw.rows[6][1]), static_cast<std::int64_t>(64 * MiB));
  EXPECT_EQ(std::get<std::string>(bw.rows[6][2]), "D2H");
  EXPECT_DOUBLE_EQ(cell(bw, 6, 4), c.bandwidth_bytes_per_s.median);
  EXPECT_DOUBLE_EQ(cell(bw, 6, 5), c.bandwidth_bytes_per_s.min);
  EXPECT_DOUBLE_EQ(cell(bw, 6, 8), 100 * c.bandwidth_bytes_per_s.median / *r.link_bytes_per_s);
  EXPECT_DOUBLE_EQ(cell(bw, 6, 9), c.time_s.median);

  const auto& d2d = table_named(ts, "d2d");
  EXPECT_EQ(keys_of(d2d), (std::vector<std::string>{"bytes", "median_bytes_per_s",
                                                    "median_read_write_bytes_per_s", "rel_spread",
                                                    "hbm_percent"}));
  ASSERT_EQ(d2d.rows.size(), 2u);
  EXPECT_DOUBLE_EQ(cell(d2d, 1, 2), 2 * 2.07e12);
  EXPECT_DOUBLE_EQ(cell(d2d, 1, 4), 100 * 2 * 2.07e12 / 4.8e12);

  const auto& sa = table_named(ts, "sync_async");
  EXPECT_EQ(sa.title, "Synchronous vs asynchronous H2D copies of 1 GiB: who waits?");
  EXPECT_EQ(keys_of(sa), (std::vector<std::string>{"memory", "api", "copy_s", "cpu_blocked_s",
                                                   "cpu_free_s", "blocked_percent"}));
  ASSERT_EQ(sa.rows.size(), 4u);
  EXPECT_DOUBLE_EQ(cell(sa, 3, 5), 100 * 0.149 / 0.158);

  const auto& s = table_named(ts, "streams");
  EXPECT_EQ(s.title, "Streams and copy engines (64 MiB pinned, 3 copy engines)");
  EXPECT_EQ(keys_of(s), (std::vector<std::string>{"copy", "streams", "median_bytes_per_s",
                                                  "rel_spread", "vs_one_stream"}));
  ASSERT_EQ(s.rows.size(), 5u);
  EXPECT_EQ(std::get<std::int64_t>(s.rows[3][1]), 5);
  EXPECT_DOUBLE_EQ(cell(s, 3, 4), 53.9e9 / 54.6e9);
  EXPECT_EQ(std::get<std::string>(s.rows[4][0]), "H2D + D2H");
  EXPECT_DOUBLE_EQ(cell(s, 4, 4), 98.4e9 / 52.5e9);

  const auto& pu = table_named(ts, "pageable_upload");
  EXPECT_EQ(pu.title,
            "Moving 1 GiB of pageable memory: cudaMemcpy vs a staged copy (16 threads, 3 x 8 MiB "
            "pinned staging buffers)");
  EXPECT_EQ(keys_of(pu),
            (std::vector<std::string>{"direction", "method", "median_bytes_per_s",
                                      "min_bytes_per_s", "max_bytes_per_s", "vs_cudamemcpy"}));
  ASSERT_EQ(pu.rows.size(), 7u);
  EXPECT_EQ(std::get<std::string>(pu.rows[2][1]),
            "ceiling: host memcpy into the 24 MiB staging ring, 16 threads");
  EXPECT_DOUBLE_EQ(cell(pu, 1, 5), 24.3e9 / 6.2e9);
  EXPECT_DOUBLE_EQ(cell(pu, 6, 5), 21.7e9 / 13.9e9);

  const auto& hr = table_named(ts, "host_register");
  EXPECT_EQ(keys_of(hr), (std::vector<std::string>{"what", "seconds"}));
  ASSERT_EQ(hr.rows.size(), 5u);
  EXPECT_DOUBLE_EQ(cell(hr, 0, 1), 0.212);
  EXPECT_DOUBLE_EQ(cell(hr, 2, 1), r.pageable_upload->plain_up.time_s.median);

  const auto& sw = table_named(ts, "sweep");
  EXPECT_EQ(keys_of(sw),
            (std::vector<std::string>{"bytes", "h2d_pinned_bytes_per_s", "d2h_pinned_bytes_per_s",
                                      "h2d_pageable_bytes_per_s", "d2h_pageable_bytes_per_s",
                                      "h2d_staged_bytes_per_s", "d2h_staged_bytes_per_s",
                                      "h2d_pinned_time_s"}));
  ASSERT_EQ(sw.rows.size(), 3u);
  EXPECT_EQ(std::get<std::string>(sw.rows[1][0]), "8 KiB");
  EXPECT_DOUBLE_EQ(cell(sw, 2, 2), 4.1e9);
  EXPECT_DOUBLE_EQ(cell(sw, 2, 4), 1.6e9);
  EXPECT_DOUBLE_EQ(cell(sw, 1, 5), 1.5e9);
  EXPECT_DOUBLE_EQ(cell(sw, 0, 6), 0.2e9);
}

TEST(LessonTransfer, PresentShowsNoValueWhereACeilingOrPinnedCopyIsMissing) {
  transfer_result r = sample();
  r.link_bytes_per_s.reset();
  r.hbm_bytes_per_s.reset();
  r.copy_engines.reset();
  for (auto& p : *r.sweep) p.h2d_pinned.reset(), p.d2h_pinned.reset();
  const auto ts = present_transfer(r);
  EXPECT_TRUE(std::holds_alternative<std::monostate>(table_named(ts, "bandwidth").rows[0][8]));
  EXPECT_TRUE(std::holds_alternative<std::monostate>(table_named(ts, "d2d").rows[0][4]));
  EXPECT_TRUE(std::holds_alternative<std::monostate>(table_named(ts, "sweep").rows[0][1]));
  EXPECT_TRUE(std::holds_alternative<std::monostate>(table_named(ts, "sweep").rows[0][7]));
  EXPECT_EQ(table_named(ts, "streams").title,
            "Streams and copy engines (64 MiB pinned, n/a copy engines)");
}

TEST(LessonTransfer, TheOtherPartsFollowInOrder) {
  transfer_result r = sample();
  double_buffer_result db;
  db.batch_bytes = 64 * MiB;
  db.batches = 8;
  db.copy_s = 0.0012;
  r.double_buffer = db;
  multi_gpu_result mg;
  mg.peer.devices = {0};
  mg.peer.can_access = {{1}};
  mg.peer.cells = {{peer_pair{}}};
  mg.peer.bytes = 256 * MiB;
  r.multi_gpu = mg;
  const auto ts = present_transfer(r);
  const auto mine = present_transfer(sample());
  const auto theirs_db = present_double_buffer(db);
  const auto theirs_mg = present_multi_gpu(mg);
  ASSERT_EQ(ts.size(), mine.size() + theirs_db.size() + theirs_mg.size());
  for (std::size_t i = 0; i < theirs_db.size(); ++i)
    EXPECT_EQ(ts[mine.size() + i].id, theirs_db[i].id);
  for (std::size_t i = 0; i < theirs_mg.size(); ++i)
    EXPECT_EQ(ts[mine.size() + theirs_db.size() + i].id, theirs_mg[i].id);
}

// ---- schema 1
// -------------------------------------------------------------------------------------

TEST(LessonTransfer, FromV1RebuildsTheResultFromTablesAndExtras) {
  // transfer.large_copy_bytes equal to a tensor's size: same-looking measurements, told apart by
  // the order the old lesson measured them in.
  transfer_result r = sample(64 * MiB);
  for (auto& p : *r.sweep)  // measured since schema 2 only: a schema-1 file never has them
    p.d2h_pageable.reset(), p.h2d_staged.reset(), p.d2h_staged.reset();
  r.pageable_upload->pieces_per_thread = 1;  // schema 1 predates the split: one range a thread
  r.pageable_upload->enqueue_while_copying = false;  // and each DMA enqueued between chunks
  transfer_result back = transfer_from_v1(v1_block(r));

  ASSERT_TRUE(back.link_bytes_per_s && back.hbm_bytes_per_s);
  EXPECT_NEAR(*back.link_bytes_per_s, *r.link_bytes_per_s, 1.0);
  EXPECT_NEAR(*back.hbm_bytes_per_s, *r.hbm_bytes_per_s, 100.0);
  EXPECT_EQ(back.copy_engines, 3);
  EXPECT_EQ(back.iterations, 20);
  EXPECT_FALSE(back.warmup_iterations);  // schema 1 did not keep it
  ASSERT_TRUE(back.streams);
  EXPECT_EQ(back.streams->requested_streams, 8);  // from the note schema 1 wrote
  EXPECT_FALSE(back.double_buffer);
  EXPECT_FALSE(back.multi_gpu);

  // Everything else exactly.
  back.link_bytes_per_s = r.link_bytes_per_s;
  back.hbm_bytes_per_s = r.hbm_bytes_per_s;
  back.warmup_iterations = r.warmup_iterations;
  EXPECT_EQ(back.shapes, r.shapes);
  EXPECT_EQ(back.d2d, r.d2d);
  EXPECT_EQ(back.sync_async, r.sync_async);
  EXPECT_EQ(back.streams, r.streams);
  EXPECT_EQ(back.pageable_upload, r.pageable_upload);
  EXPECT_EQ(back.host_register, r.host_register);
  EXPECT_EQ(back.sweep, r.sweep);
  EXPECT_EQ(back, r);
}

TEST(LessonTransfer, FromV1ReadsTablesAlone) {
  // Tables written by hand with the old keys; no extra.
  const nlohmann::json tables = nlohmann::json::parse(R"json({
    "bandwidth": {"id": "bandwidth", "title": "t", "columns": [], "notes": [], "rows": [
      {"shape": "[1024, 1024] float32", "bytes": 4194304, "direction": "H2D", "memory": "pinned",
       "median_bytes_per_s": 50.0e9, "min_bytes_per_s": 49.0e9, "max_bytes_per_s": 51.0e9,
       "rel_spread": 0.01, "link_percent": 80.0, "median_time_s": 8.4e-5},
      {"shape": "[1024, 1024] float32", "bytes": 4194304, "direction": "H2D", "memory": "pageable",
       "median_bytes_per_s": 10.0e9, "min_bytes_per_s": 9.0e9, "max_bytes_per_s": 11.0e9,
       "rel_spread": 0.05, "link_percent": 16.0, "median_time_s": 4.2e-4}]},
    "sync_async": {"id": "sync_async", "title": "Synchronous vs asynchronous H2D copies of 1.5 GiB: who waits?",
      "columns": [], "notes": [], "rows": [
      {"memory": "pinned", "api": "cudaMemcpy", "copy_s": 0.03, "cpu_blocked_s": 0.03, "cpu_free_s": 0.0, "blocked_percent": 100.0},
      {"memory": "pinned", "api": "cudaMemcpyAsync", "copy_s": 0.029, "cpu_blocked_s": 8e-6, "cpu_free_s": 0.028, "blocked_percent": 0.03}]},
    "streams": {"id": "streams", "title": "Streams and copy engines (4 MiB pinned, 2 copy engines)", "columns": [], "notes": [], "rows": [
      {"copy": "H2D", "streams": 1, "median_bytes_per_s": 50.0e9, "rel_spread": 0.01, "vs_one_stream": 1.0},
      {"copy": "H2D", "streams": 4, "median_bytes_per_s": 49.0e9, "rel_spread": 0.01, "vs_one_stream": 0.98},
      {"copy": "H2D + D2H", "streams": 2, "median_bytes_per_s": 95.0e9, "rel_spread": 0.02, "vs_one_stream": 1.9}]},
    "pageable_upload": {"id": "pageable_upload", "columns": [], "notes": [],
      "title": "Moving 1.5 GiB of pageable memory: cudaMemcpy vs a staged copy (12 threads, 4 x 16 MiB pinned staging buffers)",
      "rows": [
      {"direction": "H2D", "method": "cudaMemcpy from pageable", "median_bytes_per_s": 6.0e9, "min_bytes_per_s": 5.0e9, "max_bytes_per_s": 7.0e9, "vs_cudamemcpy": 1.0},
      {"direction": "H2D", "method": "staged upload (gpu_basics::staged_copier)", "median_bytes_per_s": 24.0e9, "min_bytes_per_s": 23.0e9, "max_bytes_per_s": 25.0e9, "vs_cudamemcpy": 4.0},
      {"direction": "host", "method": "ceiling: host memcpy into the 64 MiB staging ring, 12 threads", "median_bytes_per_s": 30.0e9, "min_bytes_per_s": 29.0e9, "max_bytes_per_s": 31.0e9, "vs_cudamemcpy": 5.0},
      {"direction": "host", "method": "host memcpy into a whole 1.5 GiB pinned buffer, 12 threads", "median_bytes_per_s": 17.0e9, "min_bytes_per_s": 16.0e9, "max_bytes_per_s": 18.0e9, "vs_cudamemcpy": 2.8},
      {"direction": "D2H", "method": "cudaMemcpy to pageable", "median_bytes_per_s": 13.0e9, "min_bytes_per_s": 12.0e9, "max_bytes_per_s": 14.0e9, "vs_cudamemcpy": 1.0},
      {"direction": "D2H", "method": "staged download (gpu_basics::staged_copier)", "median_bytes_per_s": 20.0e9, "min_bytes_per_s": 19.0e9, "max_bytes_per_s": 21.0e9, "vs_cudamemcpy": 1.5}]},
    "host_register": {"id": "host_register", "title": "Pinning 1.5 GiB in place with cudaHostRegister: when does it pay?",
      "columns": [], "notes": [], "rows": [
      {"what": "cudaHostRegister", "seconds": 0.3}, {"what": "cudaHostUnregister", "seconds": 0.1},
      {"what": "one upload, pageable (cudaMemcpy)", "seconds": 0.26}, {"what": "one upload, registered", "seconds": 0.029},
      {"what": "one upload, staged", "seconds": 0.066}]},
    "sweep": {"id": "sweep", "title": "Copy size sweep: latency gives way to bandwidth", "columns": [], "notes": [], "rows": [
      {"bytes": "4 KiB", "h2d_pinned_bytes_per_s": null, "d2h_pinned_bytes_per_s": null, "h2d_pageable_bytes_per_s": 0.5e9, "h2d_pinned_time_s": null},
      {"bytes": "1.5 KiB", "h2d_pinned_bytes_per_s": 0.4e9, "d2h_pinned_bytes_per_s": 0.45e9, "h2d_pageable_bytes_per_s": 0.2e9, "h2d_pinned_time_s": 3.8e-6},
      {"bytes": "2 GiB", "h2d_pinned_bytes_per_s": 55.0e9, "d2h_pinned_bytes_per_s": 54.0e9, "h2d_pageable_bytes_per_s": 9.0e9, "h2d_pinned_time_s": 0.039}]}
  })json");
  const transfer_result r =
      transfer_from_v1({{"tables", tables}, {"extra", nlohmann::json::object()}});

  ASSERT_EQ(r.shapes.size(), 1u);
  EXPECT_EQ(r.shapes[0].bytes, 4 * MiB);
  ASSERT_EQ(r.shapes[0].copies.size(), 2u);
  EXPECT_EQ(r.shapes[0].copies[1].memory, "pageable");
  EXPECT_DOUBLE_EQ(r.shapes[0].copies[1].bandwidth_bytes_per_s.min, 9.0e9);
  EXPECT_DOUBLE_EQ(r.shapes[0].copies[0].time_s.median, 8.4e-5);
  ASSERT_TRUE(r.link_bytes_per_s);
  EXPECT_NEAR(*r.link_bytes_per_s, 62.5e9, 1.0);
  EXPECT_TRUE(r.use_pinned_memory);

  ASSERT_EQ(r.sync_async.size(), 1u);
  EXPECT_EQ(r.sync_async[0].bytes, 3 * GiB / 2);
  EXPECT_DOUBLE_EQ(r.sync_async[0].async_call_s.median, 8e-6);
  EXPECT_DOUBLE_EQ(r.sync_async[0].sync_call_s.median, 0.03);

  ASSERT_TRUE(r.streams);
  EXPECT_EQ(r.copy_engines, 2);
  EXPECT_EQ(r.streams->bytes, 4 * MiB);  // the bandwidth table's exact size
  ASSERT_EQ(r.streams->directions.size(), 1u);
  EXPECT_EQ(r.streams->directions[0].many.streams, 4u);
  EXPECT_EQ(r.streams->requested_streams, 4);
  ASSERT_TRUE(r.streams->bidirectional);
  EXPECT_DOUBLE_EQ(r.streams->bidirectional->bandwidth_bytes_per_s.median, 95.0e9);

  ASSERT_TRUE(r.pageable_upload);
  const auto& s = *r.pageable_upload;
  EXPECT_EQ(s.bytes, 3 * GiB / 2);
  EXPECT_EQ(s.threads, 12);
  EXPECT_EQ(s.buffers, 4);
  EXPECT_EQ(s.chunk_bytes, 16 * MiB);
  EXPECT_FALSE(s.pinned_up);
  EXPECT_DOUBLE_EQ(s.ring_memcpy.bandwidth_bytes_per_s.median, 30.0e9);
  EXPECT_DOUBLE_EQ(s.staged_down.bandwidth_bytes_per_s.max, 21.0e9);
  EXPECT_DOUBLE_EQ(s.plain_up.time_s.median, 0.26);  // from the host_register table
  EXPECT_DOUBLE_EQ(s.staged_up.time_s.median, 0.066);

  ASSERT_TRUE(r.host_register);
  EXPECT_EQ(r.host_register->bytes, 3 * GiB / 2);
  EXPECT_DOUBLE_EQ(r.host_register->register_s.median, 0.3);
  EXPECT_DOUBLE_EQ(r.host_register->registered_copy.time_s.median, 0.029);

  ASSERT_TRUE(r.sweep);
  ASSERT_EQ(r.sweep->size(), 3u);
  EXPECT_EQ((*r.sweep)[0].bytes, 4 * KiB);
  EXPECT_FALSE((*r.sweep)[0].h2d_pinned);
  EXPECT_EQ((*r.sweep)[1].bytes, 1536u);
  EXPECT_EQ((*r.sweep)[2].bytes, 2 * GiB);
  EXPECT_DOUBLE_EQ((*r.sweep)[2].h2d_pinned->time_s.median, 0.039);

  // Rendered again, the tables show what schema 1 showed.
  const auto ts = present_transfer(r);
  const auto& sw = table_named(ts, "sweep");
  EXPECT_EQ(std::get<std::string>(sw.rows[1][0]), "1.5 KiB");
  EXPECT_DOUBLE_EQ(cell(sw, 1, 3), 0.2e9);
  EXPECT_EQ(table_named(ts, "pageable_upload").title,
            tables["pageable_upload"]["title"].get<std::string>());
  EXPECT_EQ(table_named(ts, "streams").title, tables["streams"]["title"].get<std::string>());
  EXPECT_DOUBLE_EQ(cell(table_named(ts, "bandwidth"), 1, 8), 16.0);
  EXPECT_DOUBLE_EQ(cell(table_named(ts, "host_register"), 2, 1), 0.26);
}

TEST(LessonTransfer, FromV1ThrowsOnAMalformedBlock) {
  const auto block_with = [](const char* id, nlohmann::json t) {
    return nlohmann::json{{"tables", {{id, std::move(t)}}}, {"extra", nlohmann::json::object()}};
  };
  gpu_basics::testing::expect_path_error([] { (void)transfer_from_v1(nlohmann::json::object()); },
                                         "tables", "missing");
  EXPECT_THROW((void)transfer_from_v1(block_with("bandwidth", {{"rows", "none"}})), format_error);
  gpu_basics::testing::expect_path_error(
      [&] {
        (void)transfer_from_v1(block_with(
            "bandwidth",
            {{"rows",
              {{{"shape", "x"}, {"bytes", "many"}, {"direction", "H2D"}, {"memory", "pinned"}}}}}));
      },
      "tables.bandwidth.rows[0].bytes", "expected an integer, got \"many\"");
  EXPECT_THROW((void)transfer_from_v1(block_with(
                   "streams", {{"title", "Streams"}, {"rows", nlohmann::json::array()}})),
               format_error);
  EXPECT_THROW(
      (void)transfer_from_v1(block_with("sweep", {{"rows",
                                                   {{{"bytes", "lots"},
                                                     {"h2d_pinned_bytes_per_s", nullptr},
                                                     {"h2d_pageable_bytes_per_s", 1.0}}}}})),
      format_error);
  nlohmann::json bad_extra = v1_block(sample());
  bad_extra["extra"]["measurements"][0]["bytes"] = "four";
  gpu_basics::testing::expect_path_error([&] { (void)transfer_from_v1(bad_extra); },
                                         "extra.measurements[0].bytes",
                                         "expected an integer, got \"four\"");
}

// ---- the registry's entry
// ---------------------------------------------------------------------------

TEST(LessonTransfer, LessonEntryRendersAndUpgrades) {
  const lesson l = transfer_lesson();
  EXPECT_EQ(l.name, "transfer");
  EXPECT_EQ(
      l.description,
      "Lesson: host<->device copies: sync vs async, pinned vs pageable, streams, PCIe bandwidth");
  EXPECT_TRUE(l.traces);
  const transfer_result r = sample();
  const auto rep = l.render(nlohmann::json(r), h200_facts());
  EXPECT_EQ(rep.lesson, "transfer");
  ASSERT_EQ(rep.tables.size(), 7u);
  EXPECT_FALSE(rep.tables[0].notes.empty());
  EXPECT_EQ(l.upgrade_v1(v1_block(r)).at("d2d"), nlohmann::json(r.d2d));
  EXPECT_THROW((void)l.render(nlohmann::json{{"shapes", "none"}}, h200_facts()), format_error);
}

namespace {
double rate(const copy_figure& f) {
  return f.bandwidth_bytes_per_s.median;
}

staging_variant variant(const std::string& name, const staging_figures& base, double up,
                        double down) {
  staging_variant v;
  v.name = name;
  v.chunk_bytes = base.chunk_bytes;
  v.buffers = base.buffers;
  v.threads = base.threads;
  v.streaming_stores = base.streaming_stores;
  v.huge_pages = base.huge_pages;
  v.up = fig("H2D", "pageable", base.bytes, up);
  v.down = fig("D2H", "pageable", base.bytes, down);
  return v;
}
}  // namespace

TEST(LessonTransfer, StagingVariantsTableAndNotesComeFromTheirFigures) {
  transfer_result r = sample();
  auto& st = *r.pageable_upload;
  auto nt = variant("streaming stores both ways", st, 30.1e9, 20.0e9);
  nt.streaming_stores = store_mode::both;
  auto half = variant("8 threads", st, 22.0e9, 25.5e9);
  half.threads = 8;
  st.variants = {nt, half};
  const auto ts = present_transfer(r);
  const auto& t = table_named(ts, "staging_variants");
  ASSERT_EQ(t.rows.size(), 3u);
  EXPECT_EQ(std::get<std::string>(t.rows[0][0]), "as configured");
  EXPECT_DOUBLE_EQ(cell(t, 0, 8), rate(st.staged_up));
  EXPECT_DOUBLE_EQ(cell(t, 1, 8), 30.1e9);
  EXPECT_DOUBLE_EQ(cell(t, 1, 10), 30.1e9 / rate(st.staged_up));
  EXPECT_DOUBLE_EQ(cell(t, 2, 11), 25.5e9 / rate(st.staged_down));
  EXPECT_EQ(std::get<std::string>(t.rows[0][7]), "while copying");   // as configured
  EXPECT_EQ(std::get<std::string>(t.rows[1][7]), "between chunks");  // recorded before the choice
  EXPECT_DOUBLE_EQ(cell(t, 0, 6), 4.0);                              // the configured split
  EXPECT_DOUBLE_EQ(cell(t, 1, 6), 1.0);  // a variant recorded before the split existed
  EXPECT_DOUBLE_EQ(cell(t, 2, 1), 8.0);
  EXPECT_EQ(std::get<std::string>(t.rows[1][4]), "both");
  EXPECT_EQ(std::get<std::string>(t.rows[2][4]), "off");

  const auto notes = explain_transfer(r, h200_facts());
  const double up0 = rate(st.staged_up), down0 = rate(st.staged_down);
  EXPECT_NE(note_with(notes, "staging_variants",
                      fmt::format("the fastest upload is \"streaming stores both ways\": {:.1f} "
                                  "GB/s, "
                                  "{:.2f}x the configured {:.1f} GB/s",
                                  30.1, 30.1e9 / up0, up0 / 1e9)),
            "");
  EXPECT_NE(note_with(notes, "staging_variants",
                      fmt::format("the fastest download is \"8 threads\": {:.1f} GB/s", 25.5)),
            "");
  EXPECT_NE(note_with(notes, "staging_variants",
                      fmt::format("reaches {:.0f}% of the upload from pinned memory ({:.1f} GB/s)",
                                  100.0 * 30.1e9 / rate(*st.pinned_up), rate(*st.pinned_up) / 1e9)),
            "");
  EXPECT_NE(note_with(notes, "staging_variants",
                      fmt::format("the upload ran at {:.1f} GB/s with plain stores and 30.1 GB/s "
                                  "with streaming stores ({:+.0f}%); the download ran at {:.1f} "
                                  "GB/s with plain stores and 20.0 GB/s with streaming stores "
                                  "({:+.0f}%)",
                                  up0 / 1e9, 100.0 * (30.1e9 / up0 - 1), down0 / 1e9,
                                  100.0 * (20.0e9 / down0 - 1))),
            "");

  EXPECT_NE(note_with(notes, "staging_variants",
                      "On this machine `transfer.staging.streaming_stores: uploads` would be "
                      "faster than the configured `off`."),
            "");

  // No variant 3% faster: said so, naming the best.
  st.variants = {variant("6 buffers", st, up0 * 1.01, down0 * 0.9)};
  const auto flat = explain_transfer(r, h200_facts());
  EXPECT_NE(note_with(flat, "staging_variants",
                      fmt::format("no change sped the upload up by 3% or more (the best, \"6 "
                                  "buffers\", ran at {:.2f}x",
                                  1.01)),
            "");
  for (const auto& text : notes_of(flat, "staging_variants"))
    EXPECT_EQ(text.find("Streaming stores, one direction"), std::string::npos) << text;

  // A variant that only moves the upload's DMA enqueue is ranked for uploads alone: its download
  // is the configured one measured again, however fast it came out.
  auto between = variant("upload DMA enqueued between chunks", st, up0 * 1.2, down0 * 1.3);
  between.pieces_per_thread = st.pieces_per_thread;
  between.enqueue_while_copying = !st.enqueue_while_copying;
  auto eight = variant("8 threads", st, up0 * 0.9, down0 * 1.18);
  eight.threads = 8;
  eight.pieces_per_thread = st.pieces_per_thread;
  st.variants = {between, eight};
  const auto enq = explain_transfer(r, h200_facts());
  EXPECT_NE(note_with(enq, "staging_variants",
                      "the fastest upload is \"upload DMA enqueued between chunks\""),
            "");
  EXPECT_NE(note_with(enq, "staging_variants", "the fastest download is \"8 threads\""), "");
  st.variants = {between};
  EXPECT_NE(note_with(explain_transfer(r, h200_facts()), "staging_variants",
                      "; none changed the download."),
            "");

  // Without variants (older results): no table, no notes.
  st.variants.clear();
  for (const auto& tb : present_transfer(r)) EXPECT_NE(tb.id, "staging_variants");
  for (const auto& n : explain_transfer(r, h200_facts())) EXPECT_NE(n.table_id, "staging_variants");
}

TEST(LessonTransfer, EachDirectionsStoresAreJudgedByTheVariantThatFlipsThem) {
  transfer_result r = sample();
  auto& st = *r.pageable_upload;
  st.streaming_stores = store_mode::downloads;
  const double up0 = rate(st.staged_up), down0 = rate(st.staged_down);
  // Plain stores change only the download; streaming both ways only the upload.
  auto plain = variant("plain stores", st, up0, 0.8 * down0);
  plain.streaming_stores = store_mode::off;
  auto both = variant("streaming stores both ways", st, 0.9 * up0, down0);
  both.streaming_stores = store_mode::both;
  auto huge = variant("streaming stores both ways, huge-page ring", st, 2 * up0, 2 * down0);
  huge.streaming_stores = store_mode::both;
  huge.huge_pages = true;  // changes more than the stores: never the stores' comparison
  st.variants = {huge, plain, both};
  const auto stores = [&] {
    for (const auto& text : notes_of(explain_transfer(r, h200_facts()), "staging_variants"))
      if (text.find("Streaming stores, one direction") != std::string::npos) return text;
    return std::string();
  };
  const std::string said = stores();
  EXPECT_NE(said.find(fmt::format("the upload ran at {:.1f} GB/s with plain stores and {:.1f} "
                                  "GB/s with streaming stores (-10%)",
                                  up0 / 1e9, 0.9 * up0 / 1e9)),
            std::string::npos)
      << said;
  EXPECT_NE(said.find(fmt::format("the download ran at {:.1f} GB/s with plain stores and {:.1f} "
                                  "GB/s with streaming stores (+25%)",
                                  0.8 * down0 / 1e9, down0 / 1e9)),
            std::string::npos)
      << said;
  EXPECT_NE(said.find("The configured `streaming_stores: downloads` is the faster choice here."),
            std::string::npos)
      << said;

  // Plain downloads 10% faster: the advice turns to off.
  st.variants[1].down = fig("D2H", "pageable", st.bytes, 1.1 * down0);
  EXPECT_NE(stores().find("`transfer.staging.streaming_stores: off` would be faster than the "
                          "configured `downloads`"),
            std::string::npos);
  // Within 3%: the configured choice stands.
  st.variants[1].down = fig("D2H", "pageable", st.bytes, 1.02 * down0);
  EXPECT_NE(stores().find("The configured `streaming_stores: downloads`"), std::string::npos);

  // Only the upload's variant measured: its clause alone, and no advice.
  st.variants = {both};
  const std::string one = stores();
  EXPECT_NE(one.find("the upload ran at"), std::string::npos) << one;
  EXPECT_EQ(one.find("the download ran at"), std::string::npos) << one;
  EXPECT_EQ(one.find("faster"), std::string::npos) << one;
}

TEST(LessonTransfer, AWinnerMustBeFasterBeyondTheSpreadAndASwingingRunSaysSo) {
  transfer_result r = sample();
  auto& st = *r.pageable_upload;
  st.streaming_stores = store_mode::downloads;
  const double up0 = rate(st.staged_up), down0 = rate(st.staged_down);
  auto plain = variant("plain stores", st, up0, 1.10 * down0);
  plain.streaming_stores = store_mode::off;
  auto both = variant("streaming stores both ways", st, 0.8 * up0, down0);
  both.streaming_stores = store_mode::both;
  st.variants = {plain, both};
  const auto said = [&](const std::string& what) {
    for (const auto& text : notes_of(explain_transfer(r, h200_facts()), "staging_variants"))
      if (text.find(what) != std::string::npos) return true;
    return false;
  };
  // Apart: plain downloads 10% faster with interquartile ranges apart win.
  ASSERT_TRUE(said("the fastest download is \"plain stores\""));
  ASSERT_TRUE(said("`transfer.staging.streaming_stores: off` would be faster"));
  ASSERT_FALSE(said("within the repetitions' spread"));

  // The same medians, but the plain run's lower quartile under the configured's upper one.
  st.variants[0].down.bandwidth_bytes_per_s.p25 = 0.95 * down0;
  EXPECT_TRUE(
      said("no change sped the download up beyond the repetitions' spread (the best, "
           "\"plain stores\", ran at 1.10x"));
  EXPECT_TRUE(said("streaming stores (-9%, within the repetitions' spread)"));
  EXPECT_TRUE(
      said("The configured `streaming_stores: downloads` stands: the download was not "
           "faster with one kind of store than the other beyond the repetitions' "
           "spread."));
  EXPECT_FALSE(said("is the faster choice here"));
  EXPECT_FALSE(said("would be faster"));
  // A variant clearly faster is named even beside a faster one whose spread overlaps.
  auto more = variant("12 buffers", st, up0, 1.05 * down0);
  more.buffers *= 2;
  st.variants.push_back(more);
  EXPECT_TRUE(said("the fastest download is \"12 buffers\""));
  st.variants.pop_back();
  // Both directions within the spread.
  st.variants[1].up.bandwidth_bytes_per_s.p75 = 1.2 * up0;
  EXPECT_TRUE(said("stands: in neither direction was one kind of store faster than the other"));
  // Older results without quartiles are judged by their medians alone.
  for (auto* f : {&st.staged_up, &st.staged_down, &st.variants[0].up, &st.variants[0].down,
                  &st.variants[1].up, &st.variants[1].down})
    f->bandwidth_bytes_per_s.p25 = f->bandwidth_bytes_per_s.p75 = 0;
  EXPECT_TRUE(said("`transfer.staging.streaming_stores: off` would be faster"));
  st.variants.clear();

  // A calm run says nothing of swings; one whose upload swung from 5.7 to 47.6 GB/s does.
  const auto swung = [&] {
    for (const auto& text : notes_of(explain_transfer(r, h200_facts()), "pageable_upload"))
      if (text.find("swung widely") != std::string::npos) return text;
    return std::string();
  };
  EXPECT_EQ(swung(), "");
  summary& b = st.staged_up.bandwidth_bytes_per_s;
  b.median = 31.9e9;
  b.min = 5.7e9;
  b.max = 47.6e9;
  b.p25 = 20e9;
  b.p75 = 40e9;
  b.iqr = b.p75 - b.p25;
  b.rel_spread = b.iqr / b.median;
  const std::string text = swung();
  EXPECT_NE(text.find("the upload from 5.7 to 47.6 GB/s (median 31.9, interquartile range 63% of "
                      "it). Something else"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("download"), std::string::npos) << text;
  EXPECT_EQ(text.find("ranking of the variants"), std::string::npos) << text;  // none measured
}
