#include "gpu_basics/transfer/staged_copy.hpp"

#include <cstring>

#include "gpu_basics/transfer/host_copy.hpp"
#include "gpu_basics/transfer/plan.hpp"

namespace gpu_basics {

staged_copier::staged_copier(staging_options o)
    : o_(o), pool_(o.threads ? o.threads : default_thread_count()) {
  GPU_BASICS_EXPECTS(o_.buffers >= 2, "the staging ring needs at least 2 buffers");
  GPU_BASICS_EXPECTS(o_.chunk_bytes >= 4096, "staging chunks of at least 4 KiB");
  GPU_BASICS_EXPECTS(o_.pieces_per_thread >= 1, "at least one piece per thread");
  o_.threads = pool_.size();
  for (unsigned i = 0; i < o_.buffers; ++i) {
    if (o_.huge_pages) {
      huge_.emplace_back(o_.chunk_bytes);
      staging_.push_back(huge_.back().as<std::byte>());
    } else {
      pinned_.emplace_back(o_.chunk_bytes);
      staging_.push_back(pinned_.back().as<std::byte>());
    }
    dma_done_.emplace_back(false);
    pending_.push_back(false);
  }
}

staged_copier::~staged_copier() {
  for (std::size_t i = 0; i < dma_done_.size(); ++i)
    if (pending_[i]) GPU_BASICS_CUDA_TRY_NOTHROW(cudaEventSynchronize(dma_done_[i].value()));
}

void staged_copier::copy_parallel(void* dst, const void* src, std::size_t bytes, bool streaming,
                                  const std::function<void()>& caller_first) {
  // Split on 64-byte lines so no two threads write the same cache line.
  pool_.parallel_ranges(
      bytes, 64,
      [&](std::size_t off, std::size_t n) {
        auto* d = static_cast<std::byte*>(dst) + off;
        const auto* s = static_cast<const std::byte*>(src) + off;
        if (streaming)
          copy_streaming(d, s, n);
        else
          std::memcpy(d, s, n);
      },
      o_.pieces_per_thread, caller_first);
}

void staged_copier::track_dma(std::size_t b, stream_view s) {
  try {
    dma_done_[b].record(s);
  } catch (...) {
    GPU_BASICS_CUDA_TRY_NOTHROW(cudaStreamSynchronize(s.value()));
    throw;
  }
  pending_[b] = true;
}

void staged_copier::upload(void* dst, const void* src, std::size_t bytes, stream_view s) {
  const auto chunks = split_fixed(bytes, o_.chunk_bytes);
  const auto dma = [&](std::size_t c) {
    const std::size_t b = c % staging_.size();
    GPU_BASICS_CUDA_TRY(cudaMemcpyAsync(static_cast<std::byte*>(dst) + chunks[c].offset,
                                        staging_[b], chunks[c].bytes, cudaMemcpyHostToDevice,
                                        s.value()));
    track_dma(b, s);
  };
  // The DMA of chunk c - 1 is enqueued by this thread while the workers copy chunk c: the few
  // microseconds of the copy call and the event record no longer leave them idle each chunk.
  // Chunk c's buffer is never c - 1's (the ring has 2 or more). When chunk c must first wait for
  // its buffer's last DMA, c - 1's is enqueued before the wait: the copy engine is not left
  // without work for the whole wait. (Otherwise it may wait the microseconds of the hand-over.)
  // Without enqueue_while_copying, each chunk's DMA is enqueued right after its copy.
  const std::function<void()> none;
  for (std::size_t c = 0; c < chunks.size(); ++c) {
    const std::size_t b = c % staging_.size();
    bool previous_queued = c == 0 || !o_.enqueue_while_copying;
    if (pending_[b] && wait_for_dma_ && !dma_done_[b].query()) {
      if (!previous_queued) dma(c - 1);
      previous_queued = true;
      dma_done_[b].synchronize();  // its previous DMA read it
    }
    const std::function<void()> previous = [&] { dma(c - 1); };
    copy_parallel(staging_[b], static_cast<const std::byte*>(src) + chunks[c].offset,
                  chunks[c].bytes, streams_uploads(o_.streaming_stores),
                  previous_queued ? none : previous);
    if (!o_.enqueue_while_copying) dma(c);
  }
  if (!chunks.empty() && o_.enqueue_while_copying) dma(chunks.size() - 1);
}

void staged_copier::download(void* dst, const void* src, std::size_t bytes, stream_view s) {
  const auto chunks = split_fixed(bytes, o_.chunk_bytes);
  const std::size_t ring = staging_.size();
  const auto enqueue = [&](std::size_t c) {
    const std::size_t b = c % ring;
    GPU_BASICS_CUDA_TRY(cudaMemcpyAsync(staging_[b],
                                        static_cast<const std::byte*>(src) + chunks[c].offset,
                                        chunks[c].bytes, cudaMemcpyDeviceToHost, s.value()));
    track_dma(b, s);
  };
  // Uploads may still be reading staging buffers: wait for them before the first DMA reuses one.
  for (std::size_t b = 0; b < ring; ++b)
    if (pending_[b]) dma_done_[b].synchronize();
  for (std::size_t c = 0; c < std::min(ring, chunks.size()); ++c) enqueue(c);
  for (std::size_t c = 0; c < chunks.size(); ++c) {
    const std::size_t b = c % ring;
    dma_done_[b].synchronize();
    pending_[b] = false;
    copy_parallel(static_cast<std::byte*>(dst) + chunks[c].offset, staging_[b], chunks[c].bytes,
                  streams_downloads(o_.streaming_stores));
    if (c + ring < chunks.size()) enqueue(c + ring);
  }
}

}  // namespace gpu_basics
