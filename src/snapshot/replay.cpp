#include "gpu_basics/snapshot/replay.hpp"

#include <chrono>
#include <cmath>
#include <memory>
#include <random>
#include <unordered_map>

#include <fmt/format.h>

#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/interrupt.hpp"

namespace gpu_basics {

namespace {

/// Each event's block: its id's index, in the order ids first appear.
std::vector<std::uint32_t> block_indices(const std::vector<replay_event>& trace,
                                         std::size_t& blocks) {
  std::unordered_map<std::uint64_t, std::uint32_t> index;
  std::vector<std::uint32_t> block;
  block.reserve(trace.size());
  std::size_t i = 0;
  for (const replay_event& e : trace) {
    if ((i++ & 0xffff) == 0) throw_if_interrupted();
    const auto [it, fresh] = index.try_emplace(e.id, static_cast<std::uint32_t>(index.size()));
    if (fresh && index.size() > UINT32_MAX)
      throw logic_error("replay: more than 2^32 - 1 distinct block ids in one trace");
    block.push_back(it->second);
  }
  blocks = index.size();
  return block;
}

/// peak_requested() over block indices.
std::size_t peak_of(const std::vector<replay_event>& trace, const std::vector<std::uint32_t>& block,
                    std::size_t blocks) {
  std::vector<std::size_t> bytes(blocks, 0);
  std::vector<bool> live(blocks, false);
  std::size_t now = 0, peak = 0;
  for (std::size_t i = 0; i < trace.size(); ++i) {
    if ((i & 0xffff) == 0) throw_if_interrupted();
    const replay_event& e = trace[i];
    const std::uint32_t b = block[i];
    if (e.kind == replay_event::op::alloc) {
      if (live[b]) now -= bytes[b];  // an id allocated twice without a free: the first leaks
      live[b] = true;
      bytes[b] = e.bytes;
      if (__builtin_add_overflow(now, e.bytes, &now))
        throw format_error("the trace's live requested bytes add up beyond 64 bits");
      if (now > kMaxReplayBytes)  // refused before any replay: its cost would follow the sizes
        throw format_error(fmt::format(
            "at event {} the trace holds {:.1f} TiB of live requests, more than any GPU has "
            "(a replay simulates at most {} TiB): not the trace of a job that ran",
            i, static_cast<double>(now) / static_cast<double>(std::size_t{1} << 40),
            kMaxReplayBytes >> 40));
      peak = std::max(peak, now);
    } else if (live[b]) {
      now -= bytes[b];
      live[b] = false;
    }
  }
  return peak;
}

/// replay_trace() of a prepared trace, without its peak_requested.
replay_result replay_prepared(const prepared_trace& trace, const allocator_options& o) {
  trace_replayer r(trace, o);
  replay_result res;
  const auto t0 = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < r.events(); ++i) {
    if (!r.step(i)) continue;
    if (const std::size_t reserved = r.reserved(); reserved > res.peak_reserved) {
      res.peak_reserved = reserved;
      res.fragmentation_at_peak = r.allocator().stats().fragmentation;
    }
  }
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  res.events = r.events();
  const allocator_stats st = r.allocator().stats();
  res.peak_allocated = static_cast<std::size_t>(st.allocated_bytes.peak);
  res.backend_allocations = st.device_allocations;
  return res;
}

}  // namespace

allocator_options replay_options(allocator_options o) {
  o.history_capacity = 0;
  if (o.release_pages == page_release::deferred) o.release_pages = page_release::eager;
  return o;
}

trace_replayer::trace_replayer(const prepared_trace& trace, const allocator_options& o,
                               address_placement placement, bool count_allocated)
    : trace_(trace),
      opts_(replay_options(o)),
      device_(simulated_device(placement)),
      alloc_(device_, opts_),
      live_(trace.blocks),
      count_allocated_(count_allocated) {}

trace_replayer::~trace_replayer() {
  for (const live_block& b : live_) alloc_.deallocate(b.ptr);  // nullptr is ignored
}

void* trace_replayer::step(std::size_t i) {
  if ((i & 0xffff) == 0) throw_if_interrupted();
  const replay_event& e = (*trace_.trace)[i];
  live_block& b = live_[trace_.block[i]];
  if (e.kind == replay_event::op::alloc) {
    void* p = alloc_.allocate(e.bytes, e.stream);
    // An id allocated again: its first block leaks (still allocated, still counted).
    b = {p, count_allocated_ ? alloc_.block_size(p) : 0, e.bytes};
    allocated_ += b.size;
    requested_ += e.bytes;
    return p;
  }
  if (b.ptr) {
    alloc_.deallocate(b.ptr);
    allocated_ -= b.size;
    requested_ -= b.requested;
    b = {};
  }
  return nullptr;
}

std::size_t peak_requested(const std::vector<replay_event>& trace) {
  std::size_t blocks = 0;
  const auto block = block_indices(trace, blocks);
  return peak_of(trace, block, blocks);
}

prepared_trace prepare_trace(const std::vector<replay_event>& trace) {
  prepared_trace p;
  p.trace = &trace;
  p.block = block_indices(trace, p.blocks);
  p.peak_requested = peak_of(trace, p.block, p.blocks);
  return p;
}

replay_result replay_trace(const std::vector<replay_event>& trace, const allocator_options& o) {
  prepared_trace p;
  p.trace = &trace;
  p.block = block_indices(trace, p.blocks);
  replay_result r = replay_prepared(p, o);
  r.peak_requested = peak_of(trace, p.block, p.blocks);
  return r;
}

replay_result replay_trace(const prepared_trace& trace, const allocator_options& o) {
  replay_result r = replay_prepared(trace, o);
  r.peak_requested = trace.peak_requested;
  return r;
}

std::vector<replay_event> mixed_trace(std::size_t ops, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> ls(std::log(512.0), std::log(32.0 * 1024 * 1024));
  constexpr std::size_t kSlots = 256;
  std::vector<replay_event> v;
  v.reserve(ops + kSlots);
  std::vector<bool> live(kSlots, false);
  for (std::size_t i = 0; i < ops; ++i) {
    const std::size_t slot = rng() % kSlots;
    const auto bytes = static_cast<std::size_t>(std::exp(ls(rng)));
    v.push_back({live[slot] ? replay_event::op::free : replay_event::op::alloc, slot, bytes, 0});
    live[slot] = !live[slot];
  }
  for (std::size_t s = 0; s < kSlots; ++s)
    if (live[s]) v.push_back({replay_event::op::free, s, 0, 0});
  return v;
}

std::vector<replay_event> transformer_trace(int steps, std::uint64_t seed) {
  // Per step: a batch of varying size runs through 24 layers; each layer keeps 4 activations for
  // the backward pass and makes 2 temporaries; the backward pass frees the activations in
  // reverse, making gradient temporaries on the way; weights (allocated once) stay.
  std::mt19937_64 rng(seed);
  std::vector<replay_event> v;
  std::uint64_t next_id = 1;
  auto alloc = [&](std::size_t bytes) {
    v.push_back({replay_event::op::alloc, next_id, bytes, 0});
    return next_id++;
  };
  auto release = [&](std::uint64_t id) { v.push_back({replay_event::op::free, id, 0, 0}); };
  constexpr int kLayers = 24;
  constexpr std::size_t kHidden = 2048;
  for (int l = 0; l < kLayers; ++l) {
    (void)alloc(4 * kHidden * kHidden * 2);  // weights, bf16
    (void)alloc(kHidden * 4);                // bias / norm
  }
  std::uniform_int_distribution<int> batch(2, 16), seq(256, 2048);
  for (int s = 0; s < steps; ++s) {
    const std::size_t tokens =
        static_cast<std::size_t>(batch(rng)) * static_cast<std::size_t>(seq(rng));
    std::vector<std::uint64_t> saved;
    for (int l = 0; l < kLayers; ++l) {
      const auto t1 = alloc(tokens * kHidden * 2 * 3);  // qkv temporaries
      saved.push_back(alloc(tokens * kHidden * 2));
      saved.push_back(alloc(tokens * kHidden * 2 * 4));  // mlp up
      saved.push_back(alloc(tokens * 4));                // norm stats
      const auto t2 = alloc(tokens * kHidden * 2);
      release(t1);
      saved.push_back(alloc(tokens * kHidden * 2));
      release(t2);
    }
    for (auto it = saved.rbegin(); it != saved.rend(); ++it) {
      const auto g = alloc(tokens * kHidden * 2);  // gradient temporary
      release(*it);
      release(g);
    }
  }
  return v;
}

}  // namespace gpu_basics
