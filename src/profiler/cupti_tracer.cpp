#include <cstdlib>
#include <cstring>
#include <mutex>

#include "gpu_basics/core/clock.hpp"
#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/profiler/activity_tracer.hpp"
#include "gpu_basics/profiler/range.hpp"

#if GPU_BASICS_HAVE_CUPTI
#include <cupti.h>
#endif

namespace gpu_basics {

#if GPU_BASICS_HAVE_CUPTI
namespace {

constexpr std::size_t kBufferBytes = 4u << 20;  // per CUPTI buffer
constexpr std::size_t kMaxBuffers = 64;         // bounded total: 256 MiB

struct collector {
  std::mutex mutex;
  activity_log log;
  std::size_t live_buffers = 0;
  bool active = false;
  std::int64_t clock_offset_ns = 0;  // added to CUPTI's timestamps where its clock is not ours
};

void shift(activity_log& log, std::int64_t d) {
  const auto move = [d](auto& v) {
    for (auto& r : v) {
      r.start_ns = static_cast<std::uint64_t>(static_cast<std::int64_t>(r.start_ns) + d);
      r.end_ns = static_cast<std::uint64_t>(static_cast<std::int64_t>(r.end_ns) + d);
    }
  };
  move(log.kernels);
  move(log.memcpys);
  move(log.memsets);
  move(log.api_calls);
  move(log.syncs);
}
collector& state() {
  static collector c;
  return c;
}

std::string cupti_error(CUptiResult r) {
  const char* s = nullptr;
  cuptiGetResultString(r, &s);
  return s ? s : "unknown CUPTI error";
}

memcpy_kind to_kind(std::uint8_t k) {
  switch (k) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD:
      return memcpy_kind::h2d;
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH:
      return memcpy_kind::d2h;
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD:
      return memcpy_kind::d2d;
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH:
      return memcpy_kind::h2h;
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP:
      return memcpy_kind::peer;
    default:
      return memcpy_kind::other;
  }
}

std::string sync_name(CUpti_ActivitySynchronizationType t) {
  switch (t) {
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE:
      return "event synchronize";
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT:
      return "stream wait event";
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE:
      return "stream synchronize";
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE:
      return "context synchronize";
    default:
      return "synchronize";
  }
}

// "cudaMalloc_v3020" -> "cudaMalloc": CUPTI's callback names carry the API version.
std::string api_name(const char* name) {
  if (!name) return "cuda?";
  std::string n = name;
  const auto v = n.rfind("_v");
  if (v != std::string::npos && v + 2 < n.size() &&
      n.find_first_not_of("0123456789", v + 2) == std::string::npos)
    n.erase(v);
  return n;
}

// CUPTI's records carry this clock's timestamps: the trace's one clock (ranges, NVML samples).
std::uint64_t CUPTIAPI cpu_clock() {
  return host_clock_ns();
}

void CUPTIAPI buffer_requested(std::uint8_t** buffer, std::size_t* size, std::size_t* max_records) {
  auto& c = state();
  *max_records = 0;
  {
    std::lock_guard lock(c.mutex);
    if (c.live_buffers >= kMaxBuffers) {  // bounded: CUPTI counts what it drops
      *buffer = nullptr;
      *size = 0;
      return;
    }
    ++c.live_buffers;
  }
  *buffer = static_cast<std::uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
}

void CUPTIAPI buffer_completed(CUcontext ctx, std::uint32_t stream, std::uint8_t* buffer,
                               std::size_t, std::size_t valid) {
  auto& c = state();
  std::lock_guard lock(c.mutex);
  CUpti_Activity* rec = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
    switch (rec->kind) {
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
      case CUPTI_ACTIVITY_KIND_KERNEL: {
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
        kernel_record r;
        r.name = k->name ? k->name : "?";
        r.start_ns = k->start;
        r.end_ns = k->end;
        r.device = k->deviceId;
        r.stream = k->streamId;
        r.correlation = k->correlationId;
        r.grid[0] = k->gridX;
        r.grid[1] = k->gridY;
        r.grid[2] = k->gridZ;
        r.block[0] = k->blockX;
        r.block[1] = k->blockY;
        r.block[2] = k->blockZ;
        r.registers_per_thread = k->registersPerThread;
        r.shared_memory_bytes = k->staticSharedMemory + k->dynamicSharedMemory;
        c.log.kernels.push_back(std::move(r));
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(rec);
        memcpy_record r;
        r.kind = to_kind(m->copyKind);
        r.bytes = m->bytes;
        r.start_ns = m->start;
        r.end_ns = m->end;
        r.device = m->deviceId;
        r.stream = m->streamId;
        r.correlation = m->correlationId;
        r.pinned = m->srcKind == CUPTI_ACTIVITY_MEMORY_KIND_PINNED ||
                   m->dstKind == CUPTI_ACTIVITY_MEMORY_KIND_PINNED;
        c.log.memcpys.push_back(r);
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(rec);
        c.log.memsets.push_back(
            {m->bytes, m->start, m->end, m->deviceId, m->streamId, m->correlationId});
        break;
      }
      case CUPTI_ACTIVITY_KIND_RUNTIME: {
        const auto* a = reinterpret_cast<const CUpti_ActivityAPI*>(rec);
        const char* name = nullptr;
        cuptiGetCallbackName(CUPTI_CB_DOMAIN_RUNTIME_API, a->cbid, &name);
        c.log.api_calls.push_back(
            {api_name(name), a->start, a->end, a->threadId, a->correlationId});
        break;
      }
      case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: {
        const auto* y = reinterpret_cast<const CUpti_ActivitySynchronization2*>(rec);
        c.log.syncs.push_back(
            {sync_name(y->type), y->start, y->end, y->correlationId, y->streamId});
        break;
      }
      default:
        break;
    }
  }
  std::size_t dropped = 0;
  if (cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped) == CUPTI_SUCCESS)
    c.log.dropped_records += dropped;
  std::free(buffer);
  --c.live_buffers;
}

constexpr CUpti_ActivityKind kKinds[] = {
    CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET,
    CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_ACTIVITY_KIND_SYNCHRONIZATION};

class cupti_tracer final : public activity_tracer {
 public:
  void start() override {
    auto& c = state();
    {
      std::lock_guard lock(c.mutex);
      c.log = activity_log{};
    }
    for (auto k : kKinds) {
      const CUptiResult r = cuptiActivityEnable(k);
      if (r != CUPTI_SUCCESS)
        throw error("CUPTI: cannot enable activity kind " + std::to_string(k) + ": " +
                    cupti_error(r));
    }
    range_log::start_recording();
  }
  activity_log stop() override {
    cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    for (auto k : kKinds) cuptiActivityDisable(k);
    cuptiActivityFlushAll(0);
    auto& c = state();
    std::lock_guard lock(c.mutex);
    c.log.ranges = range_log::stop_recording();
    if (c.clock_offset_ns != 0) shift(c.log, c.clock_offset_ns);
    return std::move(c.log);
  }
  ~cupti_tracer() override {
    cuptiActivityFlushAll(0);
    state().active = false;
  }
};

}  // namespace

std::unique_ptr<activity_tracer> make_cupti_tracer(std::string* why) {
  auto& c = state();
  {
    std::lock_guard lock(c.mutex);
    if (c.active) {
      if (why) *why = "CUPTI unavailable: a tracer is already active in this process";
      return nullptr;
    }
  }
  const CUptiResult r = cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
  if (r != CUPTI_SUCCESS) {
    if (why) *why = "CUPTI unavailable: " + cupti_error(r) + " (another profiler, or no driver?)";
    return nullptr;
  }
  // GPU timestamps on our clock; where CUPTI cannot take the callback, measure the offset once.
  if (cuptiActivityRegisterTimestampCallback(cpu_clock) == CUPTI_SUCCESS) {
    c.clock_offset_ns = 0;
  } else {
    std::uint64_t cupti_now = 0;
    const std::uint64_t before = host_clock_ns();
    cuptiGetTimestamp(&cupti_now);
    const std::uint64_t after = host_clock_ns();
    c.clock_offset_ns =
        static_cast<std::int64_t>((before + after) / 2) - static_cast<std::int64_t>(cupti_now);
  }
  c.active = true;
  return std::make_unique<cupti_tracer>();
}

#else

std::unique_ptr<activity_tracer> make_cupti_tracer(std::string* why) {
  if (why) *why = "CUPTI unavailable: this build has no CUPTI";
  return nullptr;
}

#endif

}  // namespace gpu_basics
