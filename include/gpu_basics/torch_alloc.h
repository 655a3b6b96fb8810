/* gpu_basics_torch_alloc: gpu-basics' caching allocator as PyTorch's CUDA allocator.
 *
 * Two libraries export this C ABI and nothing else:
 *   libgpu_basics_torch_alloc_c10.so  built against PyTorch's headers and libc10 (where CMake
 *                                     finds PyTorch): out of memory raises torch.OutOfMemoryError
 *                                     in Python, and CUDA graph capture is refused at its start.
 *                                     It must be loaded by the PyTorch it was built for
 *                                     (gpu_basics_torch_build_info() says which).
 *   libgpu_basics_torch_alloc.so      needs no PyTorch: out of memory throws a std::bad_alloc
 *                                     (RuntimeError in Python) and other failures a
 *                                     std::runtime_error.
 * The Python package (python/, `import gpu_basics.torch as gbt; gbt.use()`) picks one, checks it
 * against the running torch and installs it. By hand:
 *
 *   alloc = torch.cuda.memory.CUDAPluggableAllocator(
 *       path, "gpu_basics_torch_alloc", "gpu_basics_torch_free")
 *   a = alloc.allocator()               # optional hooks, as ctypes addresses:
 *   a.set_record_stream_fn(gpu_basics_torch_record_stream)
 *   a.set_reset_fn(gpu_basics_torch_empty_cache)          # reached by torch.cuda.empty_cache()
 *   a.set_memory_fraction_fn(gpu_basics_torch_set_memory_fraction)
 *   a.set_base_alloc_fn(gpu_basics_torch_base_alloc)
 *   a.set_begin_allocate_to_pool(gpu_basics_torch_begin_allocate_to_pool)   # _c10 library only
 *   torch.cuda.memory.change_current_allocator(alloc)   # before the first CUDA allocation
 *
 * One allocator per device, created on the first allocation on that device, with the options of
 * gpu_basics_torch_configure() or else of the environment, read once:
 *   GPU_BASICS_ALLOC_CONF     options in PYTORCH_CUDA_ALLOC_CONF's syntax
 *                             ("expandable_segments:True,max_split_size_mb:128,..."), plus
 *                             page_release:deferred|eager|keep (when free pages of expandable
 *                             segments give memory back). A string that does not parse is
 *                             reported once on stderr and every allocation fails with it until
 *                             the options are set again: a wrong policy is never used silently.
 *   GPU_BASICS_ALLOC_HISTORY  keep the last N allocator events (for snapshots); default 0.
 *
 * gpu_basics_torch_alloc throws (C++) on failure, as PyTorch needs: PyTorch does not check the
 * pointer a pluggable allocator returns. Every other function catches everything: failures return
 * NULL or a negative code, and gpu_basics_torch_last_error() says why. All functions are
 * thread-safe. Plain C (gpu_basics_torch_begin_allocate_to_pool aside, which takes C++ types
 * and is not declared here): usable from C, C++ and ctypes. */
#ifndef GPU_BASICS_TORCH_ALLOC_H
#define GPU_BASICS_TORCH_ALLOC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(GPU_BASICS_TORCH_ALLOC_BUILD)
#define GPU_BASICS_TORCH_API __attribute__((visibility("default")))
#else
#define GPU_BASICS_TORCH_API
#endif

/* The same type as cudaStream_t, without including CUDA's headers (NULL: the legacy default
 * stream). */
typedef struct CUstream_st* gpu_basics_torch_stream_t;

/* Version of this ABI (the layout of gpu_basics_torch_stats_t and the functions below). */
#define GPU_BASICS_TORCH_ABI_VERSION 4

/* Return codes. */
#define GPU_BASICS_TORCH_OK 0
#define GPU_BASICS_TORCH_EINVAL (-1)   /* a bad argument (device out of range, NULL out) */
#define GPU_BASICS_TORCH_ERUNTIME (-2) /* CUDA or the allocator failed: see last_error */
#define GPU_BASICS_TORCH_EIO (-4)      /* a file could not be written */

/* Statistics of one device's allocator (all bytes; counts where named so). */
typedef struct gpu_basics_torch_stats_t {
  int64_t allocated_current; /* rounded sizes of blocks handed out */
  int64_t allocated_peak;
  int64_t requested_current; /* sizes as asked */
  int64_t requested_peak;
  int64_t reserved_current; /* segments held from CUDA (cached + in use) */
  int64_t reserved_peak;
  int64_t active_current; /* handed out, or freed but awaiting other streams */
  int64_t active_peak;
  int64_t segments_current; /* count */
  int64_t segments_peak;
  int64_t allocations_current; /* count of live allocations */
  int64_t device_allocations;  /* count of cudaMalloc (or page map) calls */
  int64_t device_frees;
  int64_t alloc_retries; /* allocations that needed the cache freed first */
  int64_t ooms;
  int64_t cached_free_bytes; /* free bytes in the cache */
  int64_t largest_free_block;
  double fragmentation; /* 1 - largest free block / cached free bytes (0: nothing free) */
} gpu_basics_torch_stats_t;

/* PyTorch's alloc_fn: `size` bytes on `device` usable on `stream`; NULL for size 0 (as PyTorch's
 * own allocator). Never NULL otherwise: a failure throws a C++ exception (see the top), after the
 * allocator freed its cache and retried, as PyTorch does. Not for C callers: use try_alloc. */
GPU_BASICS_TORCH_API void* gpu_basics_torch_alloc(size_t size, int device,
                                                  gpu_basics_torch_stream_t stream);
/* As gpu_basics_torch_alloc, but NULL on failure (last_error says why): for C and ctypes, and the
 * alloc_fn of a torch.cuda.MemPool, where PyTorch's own allocator checks for NULL. */
GPU_BASICS_TORCH_API void* gpu_basics_torch_try_alloc(size_t size, int device,
                                                      gpu_basics_torch_stream_t stream);
/* PyTorch's free_fn: gives back `ptr` from gpu_basics_torch_alloc (NULL is ignored). The block is
 * reused on its stream at once, on other streams it was recorded on after their work so far. */
GPU_BASICS_TORCH_API void gpu_basics_torch_free(void* ptr, size_t size, int device,
                                                gpu_basics_torch_stream_t stream);
/* set_record_stream_fn: `stream` uses `ptr` too (Tensor.record_stream). */
GPU_BASICS_TORCH_API void gpu_basics_torch_record_stream(void* ptr,
                                                         gpu_basics_torch_stream_t stream);
/* set_reset_fn (reached by torch.cuda.empty_cache()): returns every free, unsplit segment of
 * every device to CUDA. */
GPU_BASICS_TORCH_API void gpu_basics_torch_empty_cache(void);
/* set_init_fn: records the device count (allocators are created lazily either way). PyTorch calls
 * it when the pluggable allocator is created, before Python can set it: calling it is optional. */
GPU_BASICS_TORCH_API void gpu_basics_torch_init(int device_count);
/* set_memory_fraction_fn: caps `device`'s reserved bytes at fraction x its total memory, before
 * or after its first allocation (memory reserved beyond a lowered cap stays until freed). */
GPU_BASICS_TORCH_API void gpu_basics_torch_set_memory_fraction(double fraction, int device);
/* set_base_alloc_fn: the start of the segment holding `ptr`, its size in *size (0 and NULL when
 * `ptr` is not in one). */
GPU_BASICS_TORCH_API void* gpu_basics_torch_base_alloc(void* ptr, size_t* size);

/* Fills *out with `device`'s statistics (all zero before its first allocation). */
GPU_BASICS_TORCH_API int gpu_basics_torch_stats(int device, gpu_basics_torch_stats_t* out);
/* Sets every peak of `device` to its current value. */
GPU_BASICS_TORCH_API int gpu_basics_torch_reset_peak(int device);
/* Writes `device`'s memory snapshot (segments, blocks, and the history kept: see
 * record_history) to `path`, in PyTorch's pickle format (torch.cuda.memory._snapshot()'s dict),
 * readable by `python -m torch.cuda._memory_viz`. */
GPU_BASICS_TORCH_API int gpu_basics_torch_write_snapshot(int device, const char* path);
/* The options in effect, in GPU_BASICS_ALLOC_CONF's syntax (empty for the defaults), copied into
 * buf (NUL-terminated, cut to len - 1); returns the full length, or a negative code when the
 * environment's options do not parse. */
GPU_BASICS_TORCH_API int gpu_basics_torch_conf(char* buf, size_t len);
/* The last error of any thread, or "" when there has been none. The string stays valid until the
 * calling thread's next call of this function. */
GPU_BASICS_TORCH_API const char* gpu_basics_torch_last_error(void);
/* GPU_BASICS_TORCH_ABI_VERSION of the library. */
GPU_BASICS_TORCH_API int gpu_basics_torch_abi_version(void);
/* What this library was built for, as JSON: {"abi_version": 4, "torch": "2.11.0+cu130" or null,
 * "cxx11_abi": 1, "oom_exception": "c10::OutOfMemoryError" or "std::bad_alloc", "capture": ...}.
 * A static string. */
GPU_BASICS_TORCH_API const char* gpu_basics_torch_build_info(void);
/* Sets the options of allocators created from now on (conf in GPU_BASICS_ALLOC_CONF's syntax,
 * NULL or "" for the defaults; history: events kept for snapshots), over the environment's.
 * GPU_BASICS_TORCH_EINVAL when conf does not parse, GPU_BASICS_TORCH_ERUNTIME when a device has an
 * allocator already (options are fixed at its first allocation). */
GPU_BASICS_TORCH_API int gpu_basics_torch_configure(const char* conf, size_t history);
/* Parses conf without using it: its normalised form into buf (as gpu_basics_torch_conf), or
 * GPU_BASICS_TORCH_EINVAL with the reason in last_error. */
GPU_BASICS_TORCH_API int gpu_basics_torch_check_conf(const char* conf, char* buf, size_t len);
/* Every key a conf string may hold, as JSON into buf (as gpu_basics_torch_conf): [{"name":
 * "page_release", "module": "memory", "accepts": "deferred, eager or keep", "example": "eager",
 * "ignored": false}, ...]; "ignored": PyTorch's key, accepted and without effect here. */
GPU_BASICS_TORCH_API int gpu_basics_torch_conf_keys(char* buf, size_t len);
/* `device`'s statistics as JSON (every counter with current/peak/allocated/freed, device calls,
 * the reserved limit and options; the same counters of each pool apart under "small_pool" and
 * "large_pool"; null before its first allocation) into buf; returns the full length (call again
 * with a larger buf when it is >= len). */
GPU_BASICS_TORCH_API int gpu_basics_torch_stats_json(int device, char* buf, size_t len);
/* Keeps the last `max_events` allocator events of `device` from now on (0: stops, and drops
 * them), as torch.cuda.memory._record_memory_history(max_entries=...); before the device's first
 * allocation it applies to the allocator to come. */
GPU_BASICS_TORCH_API int gpu_basics_torch_record_history(int device, size_t max_events);
/* `gpu-basics advise` in this process, on a memory snapshot's pickle bytes (what pickle.dumps()
 * makes of torch.cuda.memory._snapshot() or of gpu_basics_torch_write_snapshot()'s file; plain,
 * not gzip): every policy replayed on a simulated device, no GPU used. options_json: NULL or a JSON
 * object of
 *   "limit_bytes"           the reserved limit the job must fit (advise --fit); null: none
 *   "device_memory_bytes"   the device's memory (advise --device-memory): the printed line sets a
 *                           fraction of it where it needs one
 *   "device"                the trace advised (default: the longest)
 *   "replay_failed_request" true (default): where the trace ends in an oom entry (the snapshot
 *                           was taken when a request ran out of memory), that request is replayed
 *                           as the trace's last allocation
 *   "threads"               0 (default): one per core
 *   "name"                  the snapshot's name in the advice and in messages
 * On success *out_json is the advice as `gpu-basics advise --json` writes it (its "recommended"
 * holds the line to apply) and, where out_text is not NULL, *out_text the tables advise prints;
 * free both with gpu_basics_torch_free_string(). On failure both are NULL and last_error holds one
 * line: GPU_BASICS_TORCH_EINVAL for a NULL argument, bad options, or bytes that are not a snapshot
 * with history; GPU_BASICS_TORCH_ERUNTIME otherwise. */
GPU_BASICS_TORCH_API int gpu_basics_torch_advise(const void* pickle_bytes, size_t n,
                                                 const char* options_json, char** out_json,
                                                 char** out_text);
/* Frees a string gpu_basics_torch_advise() returned (NULL is ignored). */
GPU_BASICS_TORCH_API void gpu_basics_torch_free_string(char* s);
/* What gpu_basics_torch_alloc calls when a request runs out of memory (after the cache was freed
 * and the request retried, and the oom entry recorded in the history kept), just before it throws:
 * the device, the bytes asked for, the most the device's allocator may reserve (its memory
 * fraction's limit, else the device's memory) and what CUDA has free. It runs outside the
 * allocator's locks, so it may call this library (gpu_basics_torch_write_snapshot); it must not
 * throw. gpu_basics.torch.use(on_oom="advise") sets one that prints advise's advice. */
typedef void (*gpu_basics_torch_oom_fn)(int device, size_t size, size_t allowed,
                                        size_t device_free);
/* Sets the out-of-memory callback (NULL: none). */
GPU_BASICS_TORCH_API int gpu_basics_torch_set_oom_callback(gpu_basics_torch_oom_fn fn);

#ifdef __cplusplus
}
#endif

#endif /* GPU_BASICS_TORCH_ALLOC_H */
