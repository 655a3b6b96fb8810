#include "gpu_basics/transfer/peer_bench.hpp"

#include <fmt/format.h>

#include "gpu_basics/core/cuda.hpp"
#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/pattern_kernels.hpp"

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

summary unidirectional(side& a, side& b, std::uint64_t bytes, int warmup, int iters,
                       std::uint64_t* verified) {
  std::vector<double> rate;
  for (int i = -warmup; i < iters; ++i) {
    poison(b, bytes);
    const double s = timed_copy(a, b, bytes);
    verify(b, bytes, a.seed, a.device);
    *verified += bytes;
    if (i >= 0) rate.push_back(static_cast<double>(bytes) / s);
  }
  return summarize(rate);
}

/// Both directions at once, each on its own device's stream and timed by its own events; the
/// rate is the sum of the two concurrent rates.
summary bidirectional(side& a, side& b, std::uint64_t bytes, int warmup, int iters,
                      std::uint64_t* verified) {
  std::vector<double> rate;
  for (int i = -warmup; i < iters; ++i) {
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
    if (i >= 0) rate.push_back(ra + rb);
  }
  return summarize(rate);
}

/// 100 back-to-back small copies between two events, per copy; the last one's data checked.
summary latency(side& a, side& b, std::uint64_t bytes, int warmup, int iters,
                std::uint64_t* verified) {
  constexpr int kCopies = 100;
  std::vector<double> per_copy;
  for (int i = -warmup; i < iters; ++i) {
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
    if (i >= 0) per_copy.push_back(cuda_event::elapsed_s(start, stop) / kCopies);
  }
  return summarize(per_copy);
}

}  // namespace

peer_matrices measure_peer_matrices(const std::vector<int>& devices, std::uint64_t bytes,
                                    std::uint64_t latency_bytes, int warmup, int iterations) {
  GPU_BASICS_EXPECTS(!devices.empty(), "no devices to measure");
  GPU_BASICS_EXPECTS(bytes >= 16 && latency_bytes >= 1 && latency_bytes <= bytes,
                     "bad peer copy sizes");
  GPU_BASICS_EXPECTS(iterations >= 1 && warmup >= 0, "bad iteration counts");
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
        c.uni_on = unidirectional(a, b, bytes, warmup, iterations, &c.verified_bytes);
        c.bidir_on = bidirectional(a, b, bytes, warmup, iterations, &c.verified_bytes);
        c.latency_s = latency(a, b, latency_bytes, warmup, iterations, &c.verified_bytes);
      }
      if (self) {
        c.uni_off = c.uni_on;
        c.bidir_off = c.bidir_on;
        continue;
      }
      set_peer_access(a.device, b.device, false);
      set_peer_access(b.device, a.device, false);
      c.uni_off = unidirectional(a, b, bytes, warmup, iterations, &c.verified_bytes);
      c.bidir_off = bidirectional(a, b, bytes, warmup, iterations, &c.verified_bytes);
      if (!peer) c.latency_s = latency(a, b, latency_bytes, warmup, iterations, &c.verified_bytes);
    }
  return m;
}

}  // namespace gpu_basics
