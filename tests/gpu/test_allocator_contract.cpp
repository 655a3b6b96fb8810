// The allocator contract (tests/unit/allocator_contract.hpp) on the GPU, over the CUDA device
// backend: plain segments with and without thread caches, and expandable segments (plain ones
// where the device has no virtual memory management). Blocks are written and read back with
// copies on the harness's streams, each checked. Skipped, with the reason, where no GPU is
// visible.
#include <array>
#include <memory>
#include <string>

#include "../unit/allocator_contract.hpp"
#include "gpu_basics/core/cuda.hpp"
#include "gpu_basics/core/device_info.hpp"
#include "gpu_basics/core/errors.hpp"
#include "gpu_basics/memory/cuda_backend.hpp"

namespace gpu_basics::contract {
namespace {

class cuda_harness final : public allocator_contract_harness {
 public:
  cuda_harness() {
    try {
      (void)visible_device_count();
    } catch (const no_device_error& e) {
      unavailable_ = e.what();
      return;
    }
    for (auto& s : streams_) s = std::make_unique<cuda_stream>();
  }
  std::string unavailable() const override { return unavailable_; }
  std::shared_ptr<allocator_backend> make_backend() override {
    return std::make_shared<cuda_device_backend>();
  }
  stream_handle stream(std::size_t i) override {
    return reinterpret_cast<stream_handle>(streams_.at(i)->value());
  }
  void write(void* dst, const void* src, std::size_t n, stream_handle s) override {
    const auto st = reinterpret_cast<cudaStream_t>(s);
    GPU_BASICS_CUDA_TRY(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, st));
    GPU_BASICS_CUDA_TRY(cudaStreamSynchronize(st));
  }
  void read(void* dst, const void* src, std::size_t n, stream_handle s) override {
    const auto st = reinterpret_cast<cudaStream_t>(s);
    GPU_BASICS_CUDA_TRY(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, st));
    GPU_BASICS_CUDA_TRY(cudaStreamSynchronize(st));
  }
  // Other processes (and the driver) may take or give back device memory meanwhile.
  std::size_t memory_info_slack() const override { return 64 * MiB; }

 private:
  std::string unavailable_;
  std::array<std::unique_ptr<cuda_stream>, kStreams> streams_;
};

allocator_contract_param cuda(std::string name, allocator_options o) {
  return {std::move(name), [] { return std::make_unique<cuda_harness>(); }, o};
}

allocator_options with(void (*change)(allocator_options&)) {
  allocator_options o;
  change(o);
  return o;
}

}  // namespace

INSTANTIATE_TEST_SUITE_P(
    Cuda, AllocatorContract,
    ::testing::Values(cuda("plain", {}), cuda("no_thread_cache", with([](allocator_options& o) {
                                                o.thread_cache_blocks = 0;
                                              })),
                      cuda("expandable",
                           with([](allocator_options& o) { o.expandable_segments = true; })),
                      cuda("expandable_deferred", with([](allocator_options& o) {
                             o.expandable_segments = true;
                             o.release_pages = page_release::deferred;
                           }))),
    contract_param_name);

}  // namespace gpu_basics::contract
