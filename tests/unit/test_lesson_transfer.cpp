// Tests of the transfer lesson (written with it): the result's JSON, the notes' figures, the
// tables, the registry's entry and the staging variants; the upgrade of schema-1 files is in
// test_lesson_transfer_v1.cpp. CPU only: results are built by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include <fmt/format.h>

#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/hardware.hpp"
#include "gpu_basics/core/units.hpp"
#include "gpu_basics/lessons/transfer.hpp"
#include "lesson_test_util.hpp"
#include "transfer_test_util.hpp"

using namespace gpu_basics;
using namespace gpu_basics::lessons;
using namespace gpu_basics::lessons::transfer_test;

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
