// The C ABI of libgpu_basics_torch_alloc.so and libgpu_basics_torch_alloc_c10.so
// (include/gpu_basics/torch_alloc.h): one caching_allocator per device over cuda_device_backend,
// created on the device's first allocation with the options of gpu_basics_torch_configure() or
// GPU_BASICS_ALLOC_CONF / GPU_BASICS_ALLOC_HISTORY.
//
// Every entry point but gpu_basics_torch_alloc catches everything: ctypes cannot catch C++
// exceptions, and PyTorch calls free from deleters that must not throw. Failures are kept as the
// last error (and printed on stderr where PyTorch would otherwise not hear of them: free).
// gpu_basics_torch_alloc is PyTorch's alloc_fn, and PyTorch does not check the pointer it
// returns: it throws instead of returning NULL. Built against PyTorch's headers
// (GPU_BASICS_WITH_C10, the _c10 library), it throws c10::OutOfMemoryError, which Python sees as
// torch.OutOfMemoryError, and c10::Error (RuntimeError) for other failures; built without, it
// throws a std::bad_alloc and std::runtime_error (both RuntimeError in Python).
//
// The allocators and this file's state are never destroyed: PyTorch frees tensors during Python's
// shutdown, after a static destructor here would have run (PyTorch leaks its own allocator for the
// same reason).
#include "gpu_basics/torch_alloc.h"

#include <cuda_runtime_api.h>

#if GPU_BASICS_WITH_C10
#include <c10/util/Exception.h>
#endif

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "gpu_basics/core/cuda.hpp"
#include "gpu_basics/memory/caching_allocator.hpp"
#include "gpu_basics/memory/cuda_backend.hpp"

#include "gpu_basics/snapshot/advise.hpp"
#include "gpu_basics/snapshot/snapshot.hpp"

#include <nlohmann/json.hpp>

static_assert(std::is_same_v<gpu_basics_torch_stream_t, cudaStream_t>,
              "gpu_basics_torch_stream_t must be cudaStream_t");

namespace {

using gpu_basics::allocator_options;
using gpu_basics::caching_allocator;
using gpu_basics::stream_handle;

constexpr int kMaxDevices = 64;

#define GPU_BASICS_TORCH_STR2(x) #x
#define GPU_BASICS_TORCH_STR(x) GPU_BASICS_TORCH_STR2(x)

constexpr const char* kCaptureUnsupported =
    "gpu_basics allocator: CUDA graph capture is not supported (it has no private pools: blocks "
    "allocated during capture would be reused while the graph still uses them). Capture with "
    "PyTorch's allocator, or allocate the graph's memory in a torch.cuda.MemPool";

struct env_options {
  std::optional<allocator_options> options;  // nullopt: the environment's string did not parse
  std::string error;
};

struct state {
  std::once_flag env_once;
  env_options env;
  std::atomic<bool> configured{false};  // gpu_basics_torch_configure() set env
  std::mutex create_mutex;              // creating an allocator, and the fractions
  std::array<std::atomic<caching_allocator*>, kMaxDevices> allocators{};
  std::array<double, kMaxDevices> fractions{};  // 0: no limit
  std::mutex error_mutex;
  std::string last_error;
  std::atomic<gpu_basics_torch_oom_fn> on_oom{nullptr};
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

/// A failure PyTorch will not hear of: printed and kept.
void fail(const std::string& msg) noexcept {
  set_error(msg, true);
}

/// An out-of-memory failure of gpu_basics_torch_alloc without PyTorch's headers: a
/// std::bad_alloc that keeps the allocator's message.
class oom_error : public std::bad_alloc {
 public:
  explicit oom_error(std::string msg) : msg_(std::move(msg)) {}
  [[nodiscard]] const char* what() const noexcept override { return msg_.c_str(); }

 private:
  std::string msg_;
};

[[noreturn]] void throw_out_of_memory(const std::string& msg) {
#if GPU_BASICS_WITH_C10
  C10_THROW_ERROR(OutOfMemoryError, msg);
#else
  throw oom_error(msg);
#endif
}

[[noreturn]] void throw_failure(const std::string& msg) {
#if GPU_BASICS_WITH_C10
  C10_THROW_ERROR(Error, msg);
#else
  throw std::runtime_error(msg);
#endif
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
    try {
      allocator_options o = gpu_basics::allocator_options_from_environment();
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
      e.error = std::string(x.what()) +  // names the variable
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
  (void)environment();
  state& s = g();
  std::lock_guard lock(s.create_mutex);
  auto& slot = s.allocators[static_cast<std::size_t>(device)];
  if (caching_allocator* a = slot.load(std::memory_order_acquire)) return a;
  if (!s.env.options) throw gpu_basics::logic_error(s.env.error);
  allocator_options o = *s.env.options;
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

/// Copies `text` into buf (NUL-terminated, cut to len - 1); returns its full length.
int copy_out(const std::string& text, char* buf, std::size_t len) {
  if (buf && len) {
    const std::size_t n = std::min(text.size(), len - 1);
    std::memcpy(buf, text.data(), n);
    buf[n] = '\0';
  }
  return static_cast<int>(text.size());
}

std::string mib_text(std::size_t bytes) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

/// Calls the out-of-memory callback, if one is set, for a request of `size` bytes on `device`
/// that ran out of memory (no lock of the allocator held).
void notify_oom(int device, std::size_t size) noexcept {
  const gpu_basics_torch_oom_fn fn = g().on_oom.load(std::memory_order_acquire);
  if (!fn) return;
  try {
    caching_allocator* a = existing(device);
    gpu_basics::device_scope guard(device);
    std::size_t free = 0, total = 0;
    if (cudaMemGetInfo(&free, &total) != cudaSuccess) {
      (void)cudaGetLastError();
      free = total = 0;
    }
    const std::size_t limit = a ? a->options().reserved_limit : SIZE_MAX;
    fn(device, size, limit != SIZE_MAX ? limit : total, free);
  } catch (...) {
    set_error("out-of-memory callback: " + what_of(std::current_exception()), true);
  }
}

/// A malloc'd copy of `text` for a caller in C (gpu_basics_torch_free_string() frees it).
char* c_string(const std::string& text) {
  char* p = static_cast<char*>(std::malloc(text.size() + 1));
  if (!p) throw std::bad_alloc();
  std::memcpy(p, text.data(), text.size());
  p[text.size()] = '\0';
  return p;
}

/// A byte count of the options JSON: a non-negative integer (or null: none).
std::optional<std::size_t> size_option(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_number_unsigned() || it->get<std::uint64_t>() == 0)
    throw gpu_basics::logic_error(std::string("advise: options: \"") + key +
                                  "\" must be a positive integer of bytes, got " + it->dump());
  return static_cast<std::size_t>(it->get<std::uint64_t>());
}

/// gpu_basics_torch_advise()'s options JSON read.
gpu_basics::advise_request advise_options(const char* text) {
  gpu_basics::advise_request r;
  if (!text || !*text) return r;
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    throw gpu_basics::logic_error("advise: options: not a JSON object: " + std::string(text));
  for (const auto& [key, v] : j.items())
    if (key != "limit_bytes" && key != "device_memory_bytes" && key != "device" &&
        key != "replay_failed_request" && key != "threads" && key != "name")
      throw gpu_basics::logic_error(
          "advise: options: unknown key \"" + key +
          "\" (limit_bytes, device_memory_bytes, device, replay_failed_request, threads, name)");
  if (const auto l = size_option(j, "limit_bytes")) r.fit_limits.push_back(*l);
  r.device_memory = size_option(j, "device_memory_bytes");
  if (const auto it = j.find("device"); it != j.end() && !it->is_null()) {
    if (!it->is_number_integer() || it->get<std::int64_t>() < 0 || it->get<std::int64_t>() > 1024)
      throw gpu_basics::logic_error("advise: options: \"device\" must be a device index, got " +
                                    it->dump());
    r.device = static_cast<int>(it->get<std::int64_t>());
  }
  if (const auto it = j.find("replay_failed_request"); it != j.end()) {
    if (!it->is_boolean())
      throw gpu_basics::logic_error(
          "advise: options: \"replay_failed_request\" must be true or false, got " + it->dump());
    r.failed_request = it->get<bool>();
  }
  if (const auto it = j.find("threads"); it != j.end() && !it->is_null()) {
    if (!it->is_number_unsigned() || it->get<std::uint64_t>() > 1024)
      throw gpu_basics::logic_error("advise: options: \"threads\" must be 0 to 1024, got " +
                                    it->dump());
    r.threads = static_cast<unsigned>(it->get<std::uint64_t>());
  }
  if (const auto it = j.find("name"); it != j.end() && !it->is_null()) {
    if (!it->is_string() || it->get<std::string>().empty())
      throw gpu_basics::logic_error("advise: options: \"name\" must be a non-empty string");
    r.name = it->get<std::string>();
  }
  return r;
}

/// `size` bytes on `device` for `stream`, or a typed error whose message a Python user can act
/// on: out_of_memory (PyTorch's wording first, the allocator's figures after), logic_error.
void* allocate(std::size_t size, int device, gpu_basics_torch_stream_t stream) {
  caching_allocator* a = nullptr;
  try {
    a = allocator_for(device);
  } catch (const std::exception& e) {
    throw gpu_basics::logic_error("gpu_basics allocator: alloc(" + std::to_string(size) +
                                  " bytes, device " + std::to_string(device) + "): " + e.what());
  }
  gpu_basics::device_scope guard(device);
  // Without the capture hook (the plain library has none; with the _c10 one it is optional to
  // install) capture reaches the allocator: refuse here, since a block handed out during capture
  // would be reused by eager code while the graph still writes it.
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &capture) == cudaSuccess &&
      capture != cudaStreamCaptureStatusNone)
    throw gpu_basics::logic_error(kCaptureUnsupported);
  try {
    return a->allocate(size, reinterpret_cast<stream_handle>(stream));
  } catch (const gpu_basics::out_of_memory& e) {
    std::string limit;
    if (const std::size_t l = a->options().reserved_limit; l != SIZE_MAX)
      limit = " (memory fraction: " + mib_text(l) + " allowed)";
    throw gpu_basics::out_of_memory("CUDA out of memory. Tried to allocate " + mib_text(size) +
                                        " on GPU " + std::to_string(device) + limit +
                                        " with gpu_basics' allocator: " + e.what(),
                                    size);
  }
}

}  // namespace

extern "C" {

GPU_BASICS_TORCH_API void* gpu_basics_torch_alloc(size_t size, int device,
                                                  gpu_basics_torch_stream_t stream) {
  if (size == 0) return nullptr;
  std::string what;
  bool oom = false;
  try {
    return allocate(size, device, stream);
  } catch (const gpu_basics::out_of_memory& e) {
    oom = true;
    what = e.what();
  } catch (...) {
    what = what_of(std::current_exception());
  }
  // Thrown outside the handlers above, so nothing of ours is in flight.
  set_error(what, false);
  if (oom) {
    notify_oom(device, size);
    throw_out_of_memory(what);
  }
  throw_failure(what);
}

GPU_BASICS_TORCH_API void* gpu_basics_torch_try_alloc(size_t size, int device,
                                                      gpu_basics_torch_stream_t stream) {
  if (size == 0) return nullptr;
  try {
    return allocate(size, device, stream);
  } catch (...) {
    set_error(what_of(std::current_exception()), false);
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
  try {
    if (device_count < 0 || device_count > kMaxDevices) {
      set_error("init(" + std::to_string(device_count) + "): at most " +
                    std::to_string(kMaxDevices) + " devices are supported",
                true);
      return;
    }
    (void)environment();  // report a bad GPU_BASICS_ALLOC_CONF now rather than at the first alloc
  } catch (...) {
    set_error("init: " + what_of(std::current_exception()), true);
  }
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
    (void)environment();
    state& s = g();
    std::lock_guard lock(s.create_mutex);
    if (!s.env.options) {
      set_error(s.env.error, false);
      return GPU_BASICS_TORCH_EINVAL;
    }
    return copy_out(gpu_basics::to_conf_string(*s.env.options), buf, len);
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

GPU_BASICS_TORCH_API int gpu_basics_torch_configure(const char* conf, size_t history) {
  try {
    const std::string text = conf ? conf : "";
    allocator_options o;
    try {
      o = gpu_basics::parse_allocator_options(text);
    } catch (const std::exception& e) {
      set_error(e.what(), false);
      return GPU_BASICS_TORCH_EINVAL;
    }
    o.history_capacity = history;
    (void)environment();
    state& s = g();
    std::lock_guard lock(s.create_mutex);
    for (int d = 0; d < kMaxDevices; ++d)
      if (s.allocators[static_cast<std::size_t>(d)].load(std::memory_order_acquire)) {
        set_error("configure: device " + std::to_string(d) +
                      " has an allocator already: options are fixed at a device's first "
                      "allocation (configure before CUDA is used)",
                  false);
        return GPU_BASICS_TORCH_ERUNTIME;
      }
    s.env.options = o;
    s.env.error.clear();
    return GPU_BASICS_TORCH_OK;
  } catch (...) {
    set_error("configure: " + what_of(std::current_exception()), false);
    return GPU_BASICS_TORCH_ERUNTIME;
  }
}

GPU_BASICS_TORCH_API int gpu_basics_torch_check_conf(const char* conf, char* buf, size_t len) {
  try {
    return copy_out(
        gpu_basics::to_conf_string(gpu_basics::parse_allocator_options(conf ? conf : "")), buf,
        len);
  } catch (const gpu_basics::logic_error& e) {
    set_error(e.what(), false);
    return GPU_BASICS_TORCH_EINVAL;
  } catch (...) {
    set_error("check_conf: " + what_of(std::current_exception()), false);
    return GPU_BASICS_TORCH_ERUNTIME;
  }
}

GPU_BASICS_TORCH_API int gpu_basics_torch_conf_keys(char* buf, size_t len) {
  try {
    gpu_basics::register_allocator_keys();
    nlohmann::json a = nlohmann::json::array();
    for (const auto& k : gpu_basics::allocator_keys())
      a.push_back({{"name", k.name},
                   {"module", k.module},
                   {"accepts", k.accepts},
                   {"example", k.example},
                   {"ignored", k.ignored}});
    return copy_out(a.dump(), buf, len);
  } catch (...) {
    set_error("conf_keys: " + what_of(std::current_exception()), false);
    return GPU_BASICS_TORCH_ERUNTIME;
  }
}

GPU_BASICS_TORCH_API int gpu_basics_torch_stats_json(int device, char* buf, size_t len) {
  try {
    check_device(device);
    nlohmann::json j;
    if (caching_allocator* a = existing(device)) {
      const gpu_basics::allocator_stats s = a->stats();
      j = s;
      j["small_pool"] = s.small_pool;  // PyTorch's small_pool and large_pool, counted apart
      j["large_pool"] = s.large_pool;
      j["reserved_limit_bytes"] = a->options().reserved_limit == SIZE_MAX
                                      ? nlohmann::json(nullptr)
                                      : nlohmann::json(a->options().reserved_limit);
      j["max_split_size_bytes"] = a->options().max_split_size == SIZE_MAX
                                      ? nlohmann::json(nullptr)
                                      : nlohmann::json(a->options().max_split_size);
      j["conf"] = gpu_basics::to_conf_string(a->options());
    } else {
      j = nullptr;  // nothing allocated on it yet
    }
    return copy_out(j.dump(), buf, len);
  } catch (const gpu_basics::logic_error& e) {
    set_error(std::string("stats_json: ") + e.what(), false);
    return GPU_BASICS_TORCH_EINVAL;
  } catch (...) {
    set_error("stats_json: " + what_of(std::current_exception()), false);
    return GPU_BASICS_TORCH_ERUNTIME;
  }
}

GPU_BASICS_TORCH_API int gpu_basics_torch_record_history(int device, size_t max_events) {
  try {
    check_device(device);
    state& s = g();
    (void)environment();
    std::lock_guard lock(s.create_mutex);
    if (caching_allocator* a =
            s.allocators[static_cast<std::size_t>(device)].load(std::memory_order_acquire)) {
      a->set_history_capacity(max_events);
    } else if (s.env.options) {  // the device's allocator, when it comes, keeps them too
      s.env.options->history_capacity = max_events;
    }
    return GPU_BASICS_TORCH_OK;
  } catch (const gpu_basics::logic_error& e) {
    set_error(std::string("record_history: ") + e.what(), false);
    return GPU_BASICS_TORCH_EINVAL;
  } catch (...) {
    set_error("record_history: " + what_of(std::current_exception()), false);
    return GPU_BASICS_TORCH_ERUNTIME;
  }
}

GPU_BASICS_TORCH_API int gpu_basics_torch_advise(const void* pickle_bytes, size_t n,
                                                 const char* options_json, char** out_json,
                                                 char** out_text) {
  if (out_json) *out_json = nullptr;
  if (out_text) *out_text = nullptr;
  if (!out_json || !pickle_bytes || n == 0) {
    set_error(!out_json ? "advise: out_json is NULL" : "advise: no snapshot bytes", false);
    return GPU_BASICS_TORCH_EINVAL;
  }
  try {
    const gpu_basics::advise_request r = advise_options(options_json);
    const gpu_basics::bytes_advice b =
        gpu_basics::advise_from_bytes({static_cast<const char*>(pickle_bytes), n}, r);
    // As `gpu-basics advise --json` writes it (apps/gpu-basics/saved.cpp: saved_json_text).
    const std::string json =
        gpu_basics::to_json(b.a).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) +
        "\n";
    std::string text;
    if (out_text)
      for (const auto& t : gpu_basics::advice_tables(b.a))
        text += gpu_basics::presentation::render_text(t) + "\n";
    char* j = c_string(json);
    if (out_text) {
      try {
        *out_text = c_string(text);
      } catch (...) {
        std::free(j);
        throw;
      }
    }
    *out_json = j;
    return GPU_BASICS_TORCH_OK;
  } catch (const gpu_basics::format_error& e) {  // not a snapshot, or not one with history
    set_error(std::string("advise: ") + e.what(), false);
    return GPU_BASICS_TORCH_EINVAL;
  } catch (const gpu_basics::logic_error& e) {
    set_error(e.what(), false);
    return GPU_BASICS_TORCH_EINVAL;
  } catch (...) {
    set_error("advise: " + what_of(std::current_exception()), false);
    return GPU_BASICS_TORCH_ERUNTIME;
  }
}

GPU_BASICS_TORCH_API void gpu_basics_torch_free_string(char* s) {
  std::free(s);
}

GPU_BASICS_TORCH_API int gpu_basics_torch_set_oom_callback(gpu_basics_torch_oom_fn fn) {
  try {
    g().on_oom.store(fn, std::memory_order_release);
    return GPU_BASICS_TORCH_OK;
  } catch (...) {
    set_error("set_oom_callback: " + what_of(std::current_exception()), false);
    return GPU_BASICS_TORCH_ERUNTIME;
  }
}

GPU_BASICS_TORCH_API const char* gpu_basics_torch_build_info(void) {
  // Fixed at build time: the PyTorch whose headers this library was compiled against, and the
  // C++ ABI of its std::string (which c10's exception types carry across the boundary).
#if GPU_BASICS_WITH_C10
  return "{\"abi_version\": " GPU_BASICS_TORCH_STR(GPU_BASICS_TORCH_ABI_VERSION)
         ", \"torch\": \"" GPU_BASICS_TORCH_BUILT_FOR "\", \"cxx11_abi\": "
         GPU_BASICS_TORCH_STR(_GLIBCXX_USE_CXX11_ABI)
         ", \"oom_exception\": \"c10::OutOfMemoryError\", \"capture\": \"refused at "
         "capture_begin\"}";
#else
  return "{\"abi_version\": " GPU_BASICS_TORCH_STR(GPU_BASICS_TORCH_ABI_VERSION)
         ", \"torch\": null, \"cxx11_abi\": " GPU_BASICS_TORCH_STR(_GLIBCXX_USE_CXX11_ABI)
         ", \"oom_exception\": \"std::bad_alloc\", \"capture\": \"refused at the first "
         "allocation during capture\"}";
#endif
}

#if GPU_BASICS_WITH_C10
// PyTorch's set_begin_allocate_to_pool hook, called by CUDAGraph::capture_begin before the stream
// starts capturing: refusing here fails torch.cuda.graph() at once, with nothing captured. The
// types are c10's (MempoolId_t is a pair of CaptureId_t, unsigned long long).
GPU_BASICS_TORCH_API void gpu_basics_torch_begin_allocate_to_pool(
    int /*device*/, std::pair<unsigned long long, unsigned long long> /*pool*/,
    std::function<bool(cudaStream_t)> /*filter*/) {
  set_error(kCaptureUnsupported, false);
  C10_THROW_ERROR(Error, kCaptureUnsupported);
}
#endif

}  // extern "C"
