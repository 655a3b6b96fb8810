#include "gpu_basics/transfer/nccl.hpp"

#include <glob.h>

#include <algorithm>
#include <cstdlib>

#include <fmt/format.h>

#include "gpu_basics/core/cuda.hpp"
#include "gpu_basics/core/dynamic_library.hpp"
#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/core/sampling.hpp"
#include "nccl_kernels.hpp"

namespace gpu_basics {

// The subset of NCCL's C API used here, declared from its documented ABI (nccl.h).
namespace {
using nccl_result = int;
using nccl_comm = void*;
constexpr nccl_result kNcclSuccess = 0;
constexpr int kNcclFloat32 = 7;
constexpr int kNcclSum = 0;

/// Where NCCL may be: the user's choice, the loader path, then the places distributions and the
/// nvidia-nccl Python wheels put it.
std::vector<std::string> nccl_candidates() {
  std::vector<std::string> c;
  if (const char* p = std::getenv("GPU_BASICS_NCCL_LIBRARY"); p && *p) c.emplace_back(p);
  c.emplace_back("libnccl.so.2");
  c.emplace_back("libnccl.so");
  for (const char* pattern :
       {"/usr/local/cuda/lib64/libnccl.so*",
        "/usr/local/lib/python3*/dist-packages/nvidia/nccl/lib/libnccl.so*",
        "/usr/lib/python3/dist-packages/nvidia/nccl/lib/libnccl.so*",
        "/opt/*/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so*",
        "/opt/*/.venv/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so*"}) {
    glob_t g{};
    if (glob(pattern, 0, nullptr, &g) == 0)
      for (std::size_t i = 0; i < g.gl_pathc; ++i) c.emplace_back(g.gl_pathv[i]);
    globfree(&g);
  }
  return c;
}
}  // namespace

struct nccl_collectives::impl {
  dynamic_library lib;  // declared first: closed after the communicators are destroyed
  nccl_result (*get_version)(int*) = nullptr;
  nccl_result (*comm_init_all)(nccl_comm*, int, const int*) = nullptr;
  nccl_result (*comm_destroy)(nccl_comm) = nullptr;
  const char* (*error_string)(nccl_result) = nullptr;
  nccl_result (*group_start)() = nullptr;
  nccl_result (*group_end)() = nullptr;
  nccl_result (*all_reduce)(const void*, void*, std::size_t, int, int, nccl_comm,
                            cudaStream_t) = nullptr;
  nccl_result (*all_gather)(const void*, void*, std::size_t, int, nccl_comm,
                            cudaStream_t) = nullptr;
  nccl_result (*reduce_scatter)(const void*, void*, std::size_t, int, int, nccl_comm,
                                cudaStream_t) = nullptr;

  struct rank {
    int device = 0;
    nccl_comm comm = nullptr;
    cuda_stream stream;
    device_buffer send, recv;
    device_counter bad;  // wrong elements of the last run's output
  };
  std::vector<std::unique_ptr<rank>> ranks;

  ~impl() {
    for (auto& r : ranks)
      if (r->comm && comm_destroy) comm_destroy(r->comm);
    ranks.clear();
  }

  void check(nccl_result r, const char* what) const {
    if (r != kNcclSuccess)
      throw nccl_error(r, error_string ? error_string(r) : "unknown NCCL error", what, __FILE__,
                       __LINE__);
  }
};

std::unique_ptr<nccl_collectives> nccl_collectives::open(const std::vector<int>& devices,
                                                         std::string* why) {
  GPU_BASICS_EXPECTS(!devices.empty(), "NCCL needs at least one device");
  auto p = std::make_unique<impl>();
  try {
    p->lib = dynamic_library(nccl_candidates());
  } catch (const error&) {
    if (why)
      *why = "NCCL not available: libnccl.so.2 not found (set GPU_BASICS_NCCL_LIBRARY to its path)";
    return nullptr;
  }
  try {
    p->lib.bind_required(p->get_version, {"ncclGetVersion"});
    p->lib.bind_required(p->comm_init_all, {"ncclCommInitAll"});
    p->lib.bind_required(p->comm_destroy, {"ncclCommDestroy"});
    p->lib.bind_required(p->group_start, {"ncclGroupStart"});
    p->lib.bind_required(p->group_end, {"ncclGroupEnd"});
    p->lib.bind_required(p->all_reduce, {"ncclAllReduce"});
    p->lib.bind_required(p->all_gather, {"ncclAllGather"});
    p->lib.bind_required(p->reduce_scatter, {"ncclReduceScatter"});
  } catch (const error& e) {
    if (why) *why = std::string("NCCL not available: ") + e.what();
    return nullptr;
  }
  p->lib.bind(p->error_string, {"ncclGetErrorString"});
  // NVLink SHARP (multicast) stays off: on shared machines it can take the host's GPUs out of
  // service for others.
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  std::vector<nccl_comm> comms(devices.size(), nullptr);
  const nccl_result r =
      p->comm_init_all(comms.data(), static_cast<int>(devices.size()), devices.data());
  if (r != kNcclSuccess) {
    if (why)
      *why = std::string("NCCL not available: ncclCommInitAll failed: ") +
             (p->error_string ? p->error_string(r) : std::to_string(r));
    return nullptr;
  }
  for (std::size_t i = 0; i < devices.size(); ++i) {
    device_scope d(devices[i]);
    auto rk = std::make_unique<impl::rank>();
    rk->device = devices[i];
    rk->comm = comms[i];
    p->ranks.push_back(std::move(rk));
  }
  return std::unique_ptr<nccl_collectives>(new nccl_collectives(std::move(p)));
}

nccl_collectives::nccl_collectives(std::unique_ptr<impl> p) : impl_(std::move(p)) {}
nccl_collectives::~nccl_collectives() = default;

std::string nccl_collectives::version() const {
  int v = 0;
  impl_->get_version(&v);
  // NCCL >= 2.9: major * 10000 + minor * 100 + patch.
  return fmt::format("{}.{}.{}", v / 10000, v / 100 % 100, v % 100);
}

int nccl_collectives::ranks() const noexcept {
  return static_cast<int>(impl_->ranks.size());
}

collective_measurement nccl_collectives::run(collective op, std::uint64_t bytes,
                                             const stopping_rule& rule) {
  GPU_BASICS_EXPECTS(
      rule.min_samples >= 1 && rule.max_samples >= rule.min_samples && rule.warmup >= 0,
      "bad sample counts");
  auto& p = *impl_;
  const int n = ranks();
  const auto un = static_cast<std::uint64_t>(n);
  bytes =
      std::max<std::uint64_t>(bytes / (4 * un) * (4 * un), 4 * un);    // whole floats on every rank
  const std::uint64_t count = collective_send_count(op, bytes, n, 4);  // per rank, sent
  const std::uint64_t send_elems = count;
  const std::uint64_t recv_elems = op == collective::all_reduce   ? count
                                   : op == collective::all_gather ? count * un
                                                                  : count / un;
  collective_measurement m;
  m.op = op;
  m.bytes = bytes;
  m.ranks = n;
  for (int r = 0; r < n; ++r) {
    auto& rk = *p.ranks[static_cast<std::size_t>(r)];
    device_scope d(rk.device);
    if (rk.send.size() < send_elems * 4) rk.send = device_buffer(send_elems * 4);
    if (rk.recv.size() < recv_elems * 4) rk.recv = device_buffer(recv_elems * 4);
    GPU_BASICS_CUDA_TRY(detail::enqueue_fill_collective_input(rk.send.as<float>(), send_elems, r,
                                                              rk.stream.value()));
  }
  const auto launch = [&] {
    p.check(p.group_start(), "ncclGroupStart");
    for (int r = 0; r < n; ++r) {
      auto& rk = *p.ranks[static_cast<std::size_t>(r)];
      switch (op) {
        case collective::all_reduce:
          p.check(p.all_reduce(rk.send.data(), rk.recv.data(), count, kNcclFloat32, kNcclSum,
                               rk.comm, rk.stream.value()),
                  "ncclAllReduce");
          break;
        case collective::all_gather:
          p.check(p.all_gather(rk.send.data(), rk.recv.data(), count, kNcclFloat32, rk.comm,
                               rk.stream.value()),
                  "ncclAllGather");
          break;
        case collective::reduce_scatter:
          p.check(p.reduce_scatter(rk.send.data(), rk.recv.data(), recv_elems, kNcclFloat32,
                                   kNcclSum, rk.comm, rk.stream.value()),
                  "ncclReduceScatter");
          break;
      }
    }
    p.check(p.group_end(), "ncclGroupEnd");
  };
  // One run, timed: the slowest rank's seconds.
  const auto one = [&] {
    std::vector<cuda_event> start, stop;
    for (int r = 0; r < n; ++r) {
      device_scope d(p.ranks[static_cast<std::size_t>(r)]->device);
      start.emplace_back();
      stop.emplace_back();
      // Zero the output so a collective that wrote nothing fails the check.
      auto& rk = *p.ranks[static_cast<std::size_t>(r)];
      GPU_BASICS_CUDA_TRY(cudaMemsetAsync(rk.recv.data(), 0, recv_elems * 4, rk.stream.value()));
      start.back().record(rk.stream);
    }
    launch();
    double slowest = 0;
    for (int r = 0; r < n; ++r) {
      auto& rk = *p.ranks[static_cast<std::size_t>(r)];
      device_scope d(rk.device);
      stop[static_cast<std::size_t>(r)].record(rk.stream);
      stop[static_cast<std::size_t>(r)].synchronize();
      slowest = std::max(slowest, cuda_event::elapsed_s(start[static_cast<std::size_t>(r)],
                                                        stop[static_cast<std::size_t>(r)]));
    }
    return slowest;
  };
  std::vector<double> times;
  m.sampling = sample_each(rule, times, one);
  // Check the last run's output on every rank.
  for (int r = 0; r < n; ++r) {
    auto& rk = *p.ranks[static_cast<std::size_t>(r)];
    device_scope d(rk.device);
    rk.bad.reset(rk.stream);
    GPU_BASICS_CUDA_TRY(detail::enqueue_check_collective_output(
        rk.recv.as<float>(), recv_elems, static_cast<int>(op), n, r,
        op == collective::all_gather ? count : recv_elems, rk.bad.get(), rk.stream.value()));
    const unsigned long long bad = rk.bad.read(rk.stream);
    if (bad)
      throw verification_error(
          fmt::format("NCCL {} of {} bytes: {} of {} elements wrong on rank {} (GPU {})",
                      to_string(op), bytes, bad, recv_elems, r, rk.device));
    m.verified_elements += recv_elems;
  }
  m.time_s = summarize(times);
  m.rate = collective_bandwidth(op, bytes, m.time_s.median, n);
  return m;
}

}  // namespace gpu_basics
