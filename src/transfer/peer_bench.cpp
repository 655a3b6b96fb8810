#include "gpu_basics/transfer/peer_bench.hpp"

#include <utility>

#include <fmt/format.h>

#include "gpu_basics/core/cuda.hpp"
#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/pattern_kernels.hpp"
#include "gpu_basics/core/sampling_sides.hpp"

namespace gpu_basics {

namespace {

/// Buffers and a stream on one device: a pattern source, a destination, a mismatch counter.
struct side {
  int device;
  cuda_stream stream;
  device_buffer src, dst;
  device_counter counter;
  std::uint32_t seed;
  side(int dev, std::uint64_t bytes, std::uint32_t sd)
      : device(dev), stream(), src(bytes), dst(bytes), seed(sd) {
    enqueue_fill_pattern(src.data(), bytes, seed, stream);
    stream.synchronize();
  }
};

std::unique_ptr<side> make_side(int device, std::uint64_t bytes, std::uint32_t seed) {
  device_scope d(device);
  return std::make_unique<side>(device, bytes, seed);
}

void set_peer_access(int from, int to, bool on) {
  if (from == to) return;
  device_scope d(from);
  const cudaError_t e = on ? cudaDeviceEnablePeerAccess(to, 0) : cudaDeviceDisablePeerAccess(to);
  if (e == cudaErrorPeerAccessAlreadyEnabled || e == cudaErrorPeerAccessNotEnabled) {
    (void)cudaGetLastError();
    return;
  }
  GPU_BASICS_CUDA_TRY(e);
}

/// Zeroes dst on its device (stream-ordered before the copy that follows on `order`).
void poison(side& to, std::uint64_t bytes) {
  device_scope d(to.device);
  enqueue_fill_zero(to.dst.data(), bytes, to.stream);
  to.stream.synchronize();
}

/// Checks the bytes that arrived in `to.dst` against `from`'s pattern.
void verify(side& to, std::uint64_t bytes, std::uint32_t seed, int from_dev) {
  device_scope d(to.device);
  to.counter.reset(to.stream);
  enqueue_count_mismatches(to.dst.data(), bytes, seed, to.counter.get(), to.stream);
  const unsigned long long bad = to.counter.read(to.stream);
  if (bad)
    throw verification_error(
        fmt::format("peer copy GPU {} -> GPU {}: {} of {} bytes differ from the source", from_dev,
                    to.device, bad, bytes));
}

/// One timed copy from a.src (device a) into b.dst (device b) on a's stream, in seconds.
double timed_copy(side& a, side& b, std::uint64_t bytes) {
  device_scope d(a.device);
  cuda_event start, stop;
  start.record(a.stream);
  GPU_BASICS_CUDA_TRY(
      cudaMemcpyPeerAsync(b.dst.data(), b.device, a.src.data(), a.device, bytes, a.stream.value()));
  stop.record(a.stream);
  stop.synchronize();
  return cuda_event::elapsed_s(start, stop);
}

/// One figure by `rule`: `one()` runs and verifies one sample and returns {the seconds the rule
/// follows, the figure's value}; the values' summary, and the outcome into `outcome`.
template <class F>
summary sampled(const stopping_rule& rule, std::optional<sampling_outcome>& outcome, F one) {
  std::vector<double> seconds, values;
  outcome = sample_each_with_sides(rule, seconds, {&values}, [&] {
    const auto [t, v] = one();
    values.push_back(v);
    return t;
  });
  return summarize(values);
}

summary unidirectional(side& a, side& b, std::uint64_t bytes, const stopping_rule& rule,
                       std::uint64_t* verified, std::optional<sampling_outcome>& outcome) {
  return sampled(rule, outcome, [&] {
    poison(b, bytes);
    const double s = timed_copy(a, b, bytes);
    verify(b, bytes, a.seed, a.device);
    *verified += bytes;
    return std::pair{s, static_cast<double>(bytes) / s};
  });
}

/// Both directions at once, each on its own device's stream and timed by its own events; the
/// rate is the sum of the two concurrent rates (the rule follows the time that rate gives both
/// copies' bytes).
summary bidirectional(side& a, side& b, std::uint64_t bytes, const stopping_rule& rule,
                      std::uint64_t* verified, std::optional<sampling_outcome>& outcome) {
  return sampled(rule, outcome, [&] {
    poison(a, bytes);
    poison(b, bytes);
    cuda_event a0, a1, b0, b1;
    {
      device_scope d(a.device);
      a0.record(a.stream);
      GPU_BASICS_CUDA_TRY(cudaMemcpyPeerAsync(b.dst.data(), b.device, a.src.data(), a.device, bytes,
                                              a.stream.value()));
      a1.record(a.stream);
    }
    {
      device_scope d(b.device);
      b0.record(b.stream);
      GPU_BASICS_CUDA_TRY(cudaMemcpyPeerAsync(a.dst.data(), a.device, b.src.data(), b.device, bytes,
                                              b.stream.value()));
      b1.record(b.stream);
    }
    a1.synchronize();
    b1.synchronize();
    const double ra = static_cast<double>(bytes) / cuda_event::elapsed_s(a0, a1);
    const double rb = static_cast<double>(bytes) / cuda_event::elapsed_s(b0, b1);
    verify(b, bytes, a.seed, a.device);
    verify(a, bytes, b.seed, b.device);
    *verified += 2 * bytes;
    return std::pair{2 * static_cast<double>(bytes) / (ra + rb), ra + rb};
  });
}

/// 100 back-to-back small copies between two events, per copy; the last one's data checked.
summary latency(side& a, side& b, std::uint64_t bytes, const stopping_rule& rule,
                std::uint64_t* verified, std::optional<sampling_outcome>& outcome) {
  constexpr int kCopies = 100;
  return sampled(rule, outcome, [&] {
    poison(b, bytes);
    device_scope d(a.device);
    cuda_event start, stop;
    start.record(a.stream);
    for (int k = 0; k < kCopies; ++k)
      GPU_BASICS_CUDA_TRY(cudaMemcpyPeerAsync(b.dst.data(), b.device, a.src.data(), a.device, bytes,
                                              a.stream.value()));
    stop.record(a.stream);
    stop.synchronize();
    verify(b, bytes, a.seed, a.device);
    *verified += bytes;
    const double per_copy = cuda_event::elapsed_s(start, stop) / kCopies;
    return std::pair{per_copy, per_copy};
  });
}

}  // namespace

peer_matrices measure_peer_matrices(const std::vector<int>& devices, std::uint64_t bytes,
                                    std::uint64_t latency_bytes, const stopping_rule& rule) {
  GPU_BASICS_EXPECTS(!devices.empty(), "no devices to measure");
  GPU_BASICS_EXPECTS(bytes >= 16 && latency_bytes >= 1 && latency_bytes <= bytes,
                     "bad peer copy sizes");
  GPU_BASICS_EXPECTS(
      rule.min_samples >= 1 && rule.max_samples >= rule.min_samples && rule.warmup >= 0,
      "bad sample counts");
  peer_matrices m;
  m.devices = devices;
  m.bytes = bytes;
  m.latency_bytes = latency_bytes;
  const std::size_t n = devices.size();
  m.can_access.assign(n, std::vector<int>(n, 1));
  m.cells.assign(n, std::vector<peer_cell>(n));
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < n; ++j)
      if (i != j)
        GPU_BASICS_CUDA_TRY(cudaDeviceCanAccessPeer(&m.can_access[i][j], devices[i], devices[j]));

  // A side per device, and a twin on the same device for the copies within one GPU (the diagonal).
  std::vector<std::unique_ptr<side>> sides, twins;
  for (std::size_t i = 0; i < n; ++i) {
    sides.push_back(make_side(devices[i], bytes, 0x5eed0000u + static_cast<std::uint32_t>(i)));
    twins.push_back(make_side(devices[i], bytes, 0x7e170000u + static_cast<std::uint32_t>(i)));
  }
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < n; ++j) {
      side& a = *sides[i];
      side& b = i == j ? *twins[j] : *sides[j];
      peer_cell& c = m.cells[i][j];
      const bool self = i == j;
      const bool peer = self || m.can_access[i][j];
      // Within one GPU peer access means nothing: one measurement fills both columns.
      if (peer) {
        set_peer_access(a.device, b.device, true);
        set_peer_access(b.device, a.device, true);
        c.uni_on = unidirectional(a, b, bytes, rule, &c.verified_bytes, c.uni_on_sampling);
        c.bidir_on = bidirectional(a, b, bytes, rule, &c.verified_bytes, c.bidir_on_sampling);
        c.latency_s = latency(a, b, latency_bytes, rule, &c.verified_bytes, c.latency_sampling);
      }
      if (self) {
        c.uni_off = c.uni_on;
        c.bidir_off = c.bidir_on;
        c.uni_off_sampling = c.uni_on_sampling;
        c.bidir_off_sampling = c.bidir_on_sampling;
        continue;
      }
      set_peer_access(a.device, b.device, false);
      set_peer_access(b.device, a.device, false);
      c.uni_off = unidirectional(a, b, bytes, rule, &c.verified_bytes, c.uni_off_sampling);
      c.bidir_off = bidirectional(a, b, bytes, rule, &c.verified_bytes, c.bidir_off_sampling);
      if (!peer)
        c.latency_s = latency(a, b, latency_bytes, rule, &c.verified_bytes, c.latency_sampling);
    }
  return m;
}

}  // namespace gpu_basics
