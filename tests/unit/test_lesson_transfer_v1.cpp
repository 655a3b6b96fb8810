// Tests of the transfer lesson's upgrade of schema-1 files (transfer_from_v1): a result rebuilt
// from the tables and extra keys the old `gpu-basics transfer` wrote, from tables alone, and the
// errors of a malformed block. CPU only: results are built by hand.
#include <gtest/gtest.h>

#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/lessons/transfer.hpp"
#include "lesson_test_util.hpp"
#include "transfer_test_util.hpp"

using namespace gpu_basics;
using namespace gpu_basics::lessons;
using namespace gpu_basics::lessons::transfer_test;

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
