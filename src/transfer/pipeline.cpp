#include <algorithm>

#include <spdlog/spdlog.h>

#include "gpu_basics/transfer/kernels.hpp"
#include "gpu_basics/transfer/pipeline.hpp"
#include "gpu_basics/transfer/pipeline_schedule.hpp"

namespace gpu_basics {

pipeline_run prefetch_pipeline::execute(const std::vector<const void*>& host_batches,
                                        const compute_fn& compute, bool serial) {
  const std::size_t n = host_batches.size();
  const auto steps = serial ? serial_schedule(n) : prefetch_schedule(n, depth(), wait_for_release_);
  std::vector<cuda_event> copy_start(n), copy_end(n), compute_start(n), compute_end(n);
  cuda_event run_start;
  const stream_view cs = copy_stream_.view();
  const stream_view ks = serial ? cs : compute_stream_.view();
  {
    // Hold the copy stream while everything is enqueued (the compute stream waits on copy
    // events, so it is held too): timings then exclude the host's enqueue cost.
    stream_blocker hold;
    hold.block(cs);
    run_start.record(cs);
    for (const auto& s : steps) {
      const std::size_t buf = serial ? 0 : s.buffer;
      switch (s.op) {
        case pipeline_op::copy_wait_compute:
          GPU_BASICS_CUDA_TRY(cudaStreamWaitEvent(cs.value(), compute_done_[buf].value(), 0));
          break;
        case pipeline_op::copy:
          copy_start[s.batch].record(cs);
          GPU_BASICS_CUDA_TRY(cudaMemcpyAsync(buffers_[buf].data(), host_batches[s.batch],
                                              batch_bytes_, cudaMemcpyHostToDevice, cs.value()));
          copy_end[s.batch].record(cs);
          copy_done_[buf].record(cs);
          break;
        case pipeline_op::compute_wait_copy:
          GPU_BASICS_CUDA_TRY(cudaStreamWaitEvent(ks.value(), copy_done_[buf].value(), 0));
          break;
        case pipeline_op::compute:
          compute_start[s.batch].record(ks);
          compute(ks, buffers_[buf].data(), s.batch);
          compute_end[s.batch].record(ks);
          compute_done_[buf].record(ks);
          break;
      }
    }
    hold.release();
    copy_stream_.synchronize();
    compute_stream_.synchronize();
    if (hold.timed_out())
      spdlog::warn(
          "prefetch_pipeline: the stream was released by the blocking kernel's timeout, not "
          "by the host (a lazily loaded kernel?); this run's timeline includes the wait");
  }
  pipeline_run r;
  double end = 0;
  for (std::size_t i = 0; i < n; ++i) {
    batch_timeline t;
    t.copy_start_s = cuda_event::elapsed_s(run_start, copy_start[i]);
    t.copy_end_s = cuda_event::elapsed_s(run_start, copy_end[i]);
    t.compute_start_s = cuda_event::elapsed_s(run_start, compute_start[i]);
    t.compute_end_s = cuda_event::elapsed_s(run_start, compute_end[i]);
    end = std::max(end, t.compute_end_s);
    r.batches.push_back(t);
  }
  r.total_s = end;
  return r;
}

}  // namespace gpu_basics
