// The C ABI of libgpu_basics_torch_alloc.so (include/gpu_basics/torch_alloc.h): one
// caching_allocator per device over cuda_device_backend, created on the device's first
// allocation with the options of GPU_BASICS_ALLOC_CONF / GPU_BASICS_ALLOC_HISTORY.
//
// Every entry point catches everything: PyTorch calls them through plain function pointers and
// ctypes cannot catch C++ exceptions. Failures are kept as the last error (and printed on stderr
// where PyTorch would otherwise not hear of them: allocation and free).
//
// The allocators and this file's state are never destroyed: PyTorch frees tensors during Python's
// shutdown, after a static destructor here would have run (PyTorch leaks its own allocator for the
// same reason).
#include "gpu_basics/torch_alloc.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>

#include "gpu_basics/core/cuda.hpp"
#include "gpu_basics/memory/caching_allocator.hpp"
#include "gpu_basics/memory/cuda_backend.hpp"

#include "gpu_basics/memory/snapshot.hpp"

static_assert(std::is_same_v<gpu_basics_torch_stream_t, cudaStream_t>,
              "gpu_basics_torch_stream_t must be cudaStream_t");

namespace {

using gpu_basics::allocator_options;
using gpu_basics::caching_allocator;
using gpu_basics::stream_handle;

constexpr int kMaxDevices = 64;

struct env_options {
  std::optional<allocator_options> options;  // nullopt: the environment's string did not parse
  std::string error;
  bool abort_on_failure = false;
};

struct state {
  std::once_flag env_once;
  env_options env;
  std::mutex create_mutex;  // creating an allocator, and the fractions
  std::array<std::atomic<caching_allocator*>, kMaxDevices> allocators{};
  std::array<double, kMaxDevices> fractions{};  // 0: no limit
  std::mutex error_mutex;
  std::string last_error;
};

state& g() {
  static state* s = new state;  // never destroyed: see the top of the file
  return *s;
}

void set_error(const std::string& msg, bool print) noexcept {
  try {
    state& s = g();
    {
      std::lock_guard lock(s.error_mutex);
      s.last_error = msg;
    }
    if (print) std::fprintf(stderr, "gpu_basics_torch_alloc: %s\n", msg.c_str());
  } catch (...) {
    std::fprintf(stderr, "gpu_basics_torch_alloc: (out of memory recording an error)\n");
  }
}

/// A failure PyTorch will not hear of: printed, kept, and fatal under
/// GPU_BASICS_ALLOC_ON_FAILURE=abort.
void fail(const std::string& msg) noexcept {
  set_error(msg, true);
  if (g().env.abort_on_failure) {
    std::fprintf(stderr, "gpu_basics_torch_alloc: aborting (GPU_BASICS_ALLOC_ON_FAILURE=abort)\n");
    std::abort();
  }
}

std::string what_of(std::exception_ptr e) {
  try {
    std::rethrow_exception(std::move(e));
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "unknown exception";
  }
}

const env_options& environment() {
  state& s = g();
  std::call_once(s.env_once, [&s] {
    env_options e;
    if (const char* f = std::getenv("GPU_BASICS_ALLOC_ON_FAILURE"))
      e.abort_on_failure = std::strcmp(f, "abort") == 0;
    try {
      allocator_options o;
      if (const char* conf = std::getenv("GPU_BASICS_ALLOC_CONF"))
        o = gpu_basics::parse_allocator_conf(conf);
      if (const char* h = std::getenv("GPU_BASICS_ALLOC_HISTORY"); h && *h) {
        char* end = nullptr;
        const unsigned long long n = std::strtoull(h, &end, 10);
        if (end == h || *end != '\0')
          throw gpu_basics::logic_error(
              std::string("GPU_BASICS_ALLOC_HISTORY: expected a count of events, got '") + h + "'");
        o.history_capacity = static_cast<std::size_t>(n);
      }
      e.options = o;
    } catch (const std::exception& x) {
      e.error = std::string("GPU_BASICS_ALLOC_CONF / GPU_BASICS_ALLOC_HISTORY: ") + x.what() +
                " (every allocation fails until the process restarts with a valid value)";
      set_error(e.error, true);  // once, here
    }
    s.env = std::move(e);
  });
  return s.env;
}

/// `fraction` of the current device's memory, in bytes (PyTorch's memory fraction).
std::size_t fraction_of_device(double fraction) {
  std::size_t free = 0, total = 0;
  GPU_BASICS_CUDA_TRY(cudaMemGetInfo(&free, &total));
  return static_cast<std::size_t>(fraction * static_cast<double>(total));
}

void check_device(int device) {
  if (device < 0 || device >= kMaxDevices)
    throw gpu_basics::logic_error("device " + std::to_string(device) + " out of range [0, " +
                                  std::to_string(kMaxDevices) + ")");
}

caching_allocator* existing(int device) {
  check_device(device);
  return g().allocators[static_cast<std::size_t>(device)].load(std::memory_order_acquire);
}

/// The device's allocator, created on first use (with `device` current).
caching_allocator* allocator_for(int device) {
  if (caching_allocator* a = existing(device)) return a;
  const env_options& env = environment();
  if (!env.options) throw gpu_basics::logic_error(env.error);
  state& s = g();
  std::lock_guard lock(s.create_mutex);
  auto& slot = s.allocators[static_cast<std::size_t>(device)];
  if (caching_allocator* a = slot.load(std::memory_order_acquire)) return a;
  allocator_options o = *env.options;
  gpu_basics::device_scope guard(device);
  if (const double f = s.fractions[static_cast<std::size_t>(device)]; f > 0)
    o.reserved_limit = fraction_of_device(f);
  auto* a = new caching_allocator(std::make_shared<gpu_basics::cuda_device_backend>(), o);
  slot.store(a, std::memory_order_release);
  return a;
}

/// The device a pointer from cudaMalloc lives on.
int device_of(const void* ptr) {
  cudaPointerAttributes attr{};
  GPU_BASICS_CUDA_TRY(cudaPointerGetAttributes(&attr, ptr));
  if (attr.type != cudaMemoryTypeDevice)
    throw gpu_basics::logic_error("pointer is not device memory");
  return attr.device;
}

std::string pointer_text(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", p);
  return buf;
}

}  // namespace

extern "C" {

GPU_BASICS_TORCH_API void* gpu_basics_torch_alloc(size_t size, int device,
                                                  gpu_basics_torch_stream_t stream) {
  if (size == 0) return nullptr;
  try {
    caching_allocator* a = allocator_for(device);
    gpu_basics::device_scope guard(device);
    return a->allocate(size, reinterpret_cast<stream_handle>(stream));
  } catch (...) {
    const std::string what = what_of(std::current_exception());
    const env_options& env = environment();
    if (!env.options) {  // printed once already
      set_error(env.error, false);
      if (env.abort_on_failure) fail(env.error);
    } else {
      fail("alloc(" + std::to_string(size) + " bytes, device " + std::to_string(device) +
           "): " + what);
    }
  }
  return nullptr;
}

GPU_BASICS_TORCH_API void gpu_basics_torch_free(void* ptr, size_t size, int device,
                                                gpu_basics_torch_stream_t /*stream*/) {
  if (!ptr) return;
  try {
    caching_allocator* a = existing(device);
    if (!a) throw gpu_basics::logic_error("no allocation was ever made on this device");
    gpu_basics::device_scope guard(device);
    a->deallocate(ptr);
  } catch (...) {
    fail("free(" + pointer_text(ptr) + ", " + std::to_string(size) + " bytes, device " +
         std::to_string(device) + "): " + what_of(std::current_exception()));
  }
}

GPU_BASICS_TORCH_API void gpu_basics_torch_record_stream(void* ptr,
                                                         gpu_basics_torch_stream_t stream) {
  if (!ptr) return;
  try {
    const int device = device_of(ptr);
    caching_allocator* a = existing(device);
    if (!a) throw gpu_basics::logic_error("not an allocation of this library");
    gpu_basics::device_scope guard(device);
    a->record_stream(ptr, reinterpret_cast<stream_handle>(stream));
  } catch (...) {
    fail("record_stream(" + pointer_text(ptr) + "): " + what_of(std::current_exception()));
  }
}

GPU_BASICS_TORCH_API void gpu_basics_torch_empty_cache(void) {
  for (int d = 0; d < kMaxDevices; ++d) {
    try {
      caching_allocator* a = existing(d);
      if (!a) continue;
      gpu_basics::device_scope guard(d);
      (void)a->empty_cache();
    } catch (...) {
      set_error(
          "empty_cache(device " + std::to_string(d) + "): " + what_of(std::current_exception()),
          true);
    }
  }
}

GPU_BASICS_TORCH_API void gpu_basics_torch_init(int device_count) {
  if (device_count < 0 || device_count > kMaxDevices) {
    set_error("init(" + std::to_string(device_count) + "): at most " + std::to_string(kMaxDevices) +
                  " devices are supported",
              true);
    return;
  }
  (void)environment();  // report a bad GPU_BASICS_ALLOC_CONF now rather than at the first alloc
}

GPU_BASICS_TORCH_API void gpu_basics_torch_set_memory_fraction(double fraction, int device) {
  try {
    check_device(device);
    if (!(fraction > 0 && fraction <= 1))
      throw gpu_basics::logic_error("fraction must be in (0, 1], got " + std::to_string(fraction));
    state& s = g();
    std::lock_guard lock(s.create_mutex);
    s.fractions[static_cast<std::size_t>(device)] = fraction;
    if (caching_allocator* a =
            s.allocators[static_cast<std::size_t>(device)].load(std::memory_order_acquire)) {
      gpu_basics::device_scope guard(device);
      a->set_reserved_limit(fraction_of_device(fraction));
    }
  } catch (...) {
    set_error("set_memory_fraction(" + std::to_string(fraction) + ", device " +
                  std::to_string(device) + "): " + what_of(std::current_exception()),
              true);
  }
}

GPU_BASICS_TORCH_API void* gpu_basics_torch_base_alloc(void* ptr, size_t* size) {
  if (size) *size = 0;
  if (!ptr) return nullptr;
  try {
    const int device = device_of(ptr);
    caching_allocator* a = existing(device);
    if (!a) throw gpu_basics::logic_error("not an allocation of this library");
    const auto p = reinterpret_cast<std::uintptr_t>(ptr);
    for (const gpu_basics::segment_view& s : a->segments()) {
      if (p >= s.ptr && p < s.ptr + s.total_size) {
        if (size) *size = s.total_size;
        return reinterpret_cast<void*>(s.ptr);
      }
    }
    throw gpu_basics::logic_error("not inside a segment of this library");
  } catch (...) {
    set_error("base_alloc(" + pointer_text(ptr) + "): " + what_of(std::current_exception()), false);
  }
  return nullptr;
}

GPU_BASICS_TORCH_API int gpu_basics_torch_stats(int device, gpu_basics_torch_stats_t* out) {
  if (!out) {
    set_error("stats: out is NULL", false);
    return GPU_BASICS_TORCH_EINVAL;
  }
  std::memset(out, 0, sizeof *out);
  try {
    caching_allocator* a = existing(device);
    if (!a) return GPU_BASICS_TORCH_OK;  // nothing allocated yet: all zero
    const gpu_basics::allocator_stats s = a->stats();
    out->allocated_current = s.allocated_bytes.current;
    out->allocated_peak = s.allocated_bytes.peak;
    out->requested_current = s.requested_bytes.current;
    out->requested_peak = s.requested_bytes.peak;
    out->reserved_current = s.reserved_bytes.current;
    out->reserved_peak = s.reserved_bytes.peak;
    out->active_current = s.active_bytes.current;
    out->active_peak = s.active_bytes.peak;
    out->segments_current = s.segment_count.current;
    out->segments_peak = s.segment_count.peak;
    out->allocations_current = s.allocation_count.current;
    out->device_allocations = s.device_allocations;
    out->device_frees = s.device_frees;
    out->alloc_retries = s.alloc_retries;
    out->ooms = s.ooms;
    out->cached_free_bytes = static_cast<int64_t>(s.cached_free_bytes);
    out->largest_free_block = static_cast<int64_t>(s.largest_free_block);
    out->fragmentation = s.fragmentation;
    return GPU_BASICS_TORCH_OK;
  } catch (const gpu_basics::logic_error& e) {
    set_error(std::string("stats: ") + e.what(), false);
    return GPU_BASICS_TORCH_EINVAL;
  } catch (...) {
    set_error("stats: " + what_of(std::current_exception()), false);
    return GPU_BASICS_TORCH_ERUNTIME;
  }
}

GPU_BASICS_TORCH_API int gpu_basics_torch_reset_peak(int device) {
  try {
    if (caching_allocator* a = existing(device)) a->reset_peak_stats();
    return GPU_BASICS_TORCH_OK;
  } catch (const gpu_basics::logic_error& e) {
    set_error(std::string("reset_peak: ") + e.what(), false);
    return GPU_BASICS_TORCH_EINVAL;
  } catch (...) {
    set_error("reset_peak: " + what_of(std::current_exception()), false);
    return GPU_BASICS_TORCH_ERUNTIME;
  }
}

GPU_BASICS_TORCH_API int gpu_basics_torch_write_snapshot(int device, const char* path) {
  if (!path || !*path) {
    set_error("write_snapshot: path is NULL or empty", false);
    return GPU_BASICS_TORCH_EINVAL;
  }
  try {
    caching_allocator* a = existing(device);
    if (!a)
      throw gpu_basics::logic_error("device " + std::to_string(device) +
                                    " has no allocator yet (nothing was allocated on it)");
    if (a->options().history_capacity == 0)
      throw gpu_basics::logic_error(
          "no history is kept: set GPU_BASICS_ALLOC_HISTORY=N (events) before the first "
          "allocation");
    gpu_basics::write_snapshot(std::string(path), a->segments(), a->history(), device,
                               a->options());
    return GPU_BASICS_TORCH_OK;
  } catch (const gpu_basics::logic_error& e) {
    set_error(std::string("write_snapshot: ") + e.what(), false);
    return GPU_BASICS_TORCH_EINVAL;
  } catch (...) {
    set_error("write_snapshot(" + std::string(path) + "): " + what_of(std::current_exception()),
              false);
    return GPU_BASICS_TORCH_EIO;
  }
}

GPU_BASICS_TORCH_API int gpu_basics_torch_conf(char* buf, size_t len) {
  try {
    const env_options& env = environment();
    if (!env.options) {
      set_error(env.error, false);
      return GPU_BASICS_TORCH_EINVAL;
    }
    const std::string conf = gpu_basics::to_conf_string(*env.options);
    if (buf && len) {
      const std::size_t n = std::min(conf.size(), len - 1);
      std::memcpy(buf, conf.data(), n);
      buf[n] = '\0';
    }
    return static_cast<int>(conf.size());
  } catch (...) {
    set_error("conf: " + what_of(std::current_exception()), false);
    return GPU_BASICS_TORCH_ERUNTIME;
  }
}

GPU_BASICS_TORCH_API const char* gpu_basics_torch_last_error(void) {
  thread_local std::string copy;
  try {
    state& s = g();
    std::lock_guard lock(s.error_mutex);
    copy = s.last_error;
  } catch (...) {
    return "(out of memory reading the last error)";
  }
  return copy.c_str();
}

GPU_BASICS_TORCH_API int gpu_basics_torch_abi_version(void) {
  return GPU_BASICS_TORCH_ABI_VERSION;
}

}  // extern "C"
