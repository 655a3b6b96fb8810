// Shared by the transfer lesson's tests (test_lesson_transfer.cpp, test_lesson_transfer_v1.cpp):
// a full result built by hand with varied figures, the H200's facts, lookups into notes and
// tables, and a schema-1 block written as the old `gpu-basics transfer` wrote it.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpu_basics/core/hardware.hpp"
#include "gpu_basics/lessons/transfer.hpp"
#include "lesson_test_util.hpp"

namespace gpu_basics::lessons::transfer_test {

inline constexpr std::uint64_t KiB = 1024, MiB = KiB * 1024, GiB = MiB * 1024;

inline summary around(double median, std::size_t count = 20) {
  return gpu_basics::testing::spread_around(median, count);
}

inline copy_figure fig(const std::string& dir, const std::string& mem, std::uint64_t bytes,
                       double rate, unsigned streams = 1) {
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

inline shape_copies shape(const std::string& label, std::uint64_t bytes, double scale) {
  return {
      label,
      bytes,
      {fig("H2D", "pinned", bytes, 52.1e9 * scale), fig("H2D", "pageable", bytes, 9.3e9 * scale),
       fig("D2H", "pinned", bytes, 54.7e9 * scale), fig("D2H", "pageable", bytes, 13.9e9 * scale)}};
}

/// A full result; `large` is transfer.large_copy_bytes (equal to a tensor's size in one test,
/// so that measurements of the same kind and size must be told apart by their order).
inline transfer_result sample(std::uint64_t large = GiB) {
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
  r.sync_async = {
      {"pinned", large, around(0.0195), around(7.5e-6), around(0.0193), around(0.0192), {}},
      {"pageable", large, around(0.161), around(0.149), around(0.158), around(0.009), {}}};
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

inline device_facts h200_facts() {
  device_info d;
  d.name = "NVIDIA H200";
  d.copy_engines = 3;
  d.l2_cache_bytes = 60 * MiB;
  d.pcie_generation_max = 5;
  d.pcie_width_max = 16;
  return device_facts::of(d, "ok");
}

inline std::vector<std::string> notes_of(const std::vector<note>& notes, const std::string& id) {
  std::vector<std::string> out;
  for (const auto& n : notes)
    if (n.table_id == id) out.push_back(n.text);
  return out;
}

/// The one note of table `id` that contains `needle`.
inline std::string note_with(const std::vector<note>& notes, const std::string& id,
                             const std::string& needle) {
  for (const auto& t : notes_of(notes, id))
    if (t.find(needle) != std::string::npos) return t;
  ADD_FAILURE() << "no note of " << id << " contains '" << needle << "'";
  return {};
}

inline const presentation::table& table_named(const std::vector<presentation::table>& ts,
                                              const std::string& id) {
  for (const auto& t : ts)
    if (t.id == id) return t;
  throw std::out_of_range("no table " + id);
}

inline std::vector<std::string> keys_of(const presentation::table& t) {
  std::vector<std::string> k;
  for (const auto& c : t.columns) k.push_back(c.key);
  return k;
}

inline double cell(const presentation::table& t, std::size_t row, std::size_t col) {
  return std::get<double>(t.rows.at(row).at(col));
}

// ---- schema 1, written as the old `gpu-basics transfer` wrote it ------------------------------

/// measurement_json of the old lesson: the keys it wrote for each copy.
inline nlohmann::json old_measurement_full(const copy_figure& f) {
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
inline nlohmann::json old_measurements(const transfer_result& r) {
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
inline nlohmann::json v1_block(const transfer_result& r) {
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

}  // namespace gpu_basics::lessons::transfer_test
