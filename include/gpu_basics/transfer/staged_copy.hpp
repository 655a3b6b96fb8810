// Fast copies between pageable host memory and the device: host threads copy pageable data
// into a ring of pinned staging buffers while the DMA of the previous chunk runs. cudaMemcpy
// from pageable memory does the same through one small driver buffer and one thread; here the
// copy runs at the slower of two stages: the threads' memcpy into the ring (which stays in the
// CPU's cache, so only the pageable side touches DRAM) and the DMA out of it (the pinned rate).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "gpu_basics/core/config.hpp"
#include "gpu_basics/core/cuda.hpp"
#include "gpu_basics/core/thread_pool.hpp"

namespace gpu_basics {

struct staging_options {
  std::size_t chunk_bytes = 8u << 20;
  unsigned buffers = 6;  // >= 2
  unsigned threads = 0;  // 0: default_thread_count()
  /// Which host copies write with non-temporal stores (host_copy.hpp): into the ring on upload,
  /// into the destination on download.
  store_mode streaming_stores = store_mode::downloads;
  /// The ring in transparent huge pages, pinned with cudaHostRegister (huge_pinned_memory),
  /// instead of cudaHostAlloc's 4 KiB pages.
  bool huge_pages = false;
  /// Ranges each thread's share of a chunk is cut into, handed out one at a time: a thread the
  /// OS slows then holds up one small range, not a 16th of the chunk.
  unsigned pieces_per_thread = 16;  // >= 1
  /// On upload, chunk c - 1's DMA is enqueued by the calling thread while the threads copy chunk
  /// c; when false it is enqueued between the two copies, and the threads idle meanwhile.
  bool enqueue_while_copying = true;
};

class staged_copier {
 public:
  /// A ring of `o.buffers` pinned buffers of `o.chunk_bytes` and a pool of `o.threads` threads.
  /// @throws logic_error for fewer than 2 buffers or chunks under 4 KiB; out_of_memory,
  /// cuda_error when the ring cannot be pinned.
  explicit staged_copier(staging_options o = {});
  /// Waits for DMAs that may still read the ring.
  ~staged_copier();
  staged_copier(const staged_copier&) = delete;
  staged_copier& operator=(const staged_copier&) = delete;

  /// Copies `bytes` from pageable `src` to device `dst` on stream `s`. Returns once `src` may be
  /// reused; the last DMAs may still run on `s` (synchronize `s` before reading `dst` elsewhere).
  /// @throws cuda_error when a copy or event call fails; when an event cannot be recorded after
  /// its DMA was enqueued, the call first waits for `s` to finish, so no buffer is in use.
  void upload(void* dst, const void* src, std::size_t bytes, stream_view s);
  /// Copies `bytes` from device `src` (ordered after earlier work on `s`) to pageable `dst`;
  /// returns when `dst` holds the data.
  /// @throws cuda_error when a copy or event call fails (after waiting for `s`, as upload does).
  void download(void* dst, const void* src, std::size_t bytes, stream_view s);

  /// The options in use (threads resolved to the pool's size).
  [[nodiscard]] const staging_options& options() const noexcept { return o_; }
  /// Threads that copy, the caller included.
  [[nodiscard]] unsigned threads() const noexcept { return pool_.size(); }

  /// Test-only: when false, a staging buffer is refilled without waiting for its DMA to finish
  /// (the race the ring's events prevent), so tests can prove they would catch it.
  void set_wait_for_dma_for_testing(bool wait) noexcept { wait_for_dma_ = wait; }

 private:
  /// Copies with the pool; `caller_first` runs on this thread while the workers start (see
  /// thread_pool::parallel_for).
  void copy_parallel(void* dst, const void* src, std::size_t bytes, bool streaming,
                     const std::function<void()>& caller_first = {});
  /// Records buffer `b`'s event after a DMA on `s` that uses it was enqueued. If the record
  /// fails, the DMA cannot be tracked: waits for the whole stream before rethrowing, so the
  /// buffer is never refilled or freed while the copy engine still reads or writes it.
  void track_dma(std::size_t b, stream_view s);

  staging_options o_;
  thread_pool pool_;
  std::vector<pinned_buffer> pinned_;  // the ring's memory: one of these two
  std::vector<huge_pinned_buffer> huge_;
  std::vector<std::byte*> staging_;  // the ring's buffers
  std::vector<cuda_event> dma_done_;
  std::vector<bool> pending_;
  bool wait_for_dma_ = true;
};

}  // namespace gpu_basics
