// The allocator contract (allocator_contract.hpp) on the CPU, over the simulated backend
// (fake_backend with real host memory, so blocks are written and read back): plain segments with
// and without thread caches, PyTorch's power-of-two rounding, expandable segments under each page
// release policy, and expandable segments asked of a backend without virtual memory.
#include <cstring>
#include <memory>

#include "allocator_contract.hpp"
#include "gpu_basics/memory/fake_backend.hpp"

namespace gpu_basics::contract {
namespace {

class fake_harness final : public allocator_contract_harness {
 public:
  explicit fake_harness(bool virtual_memory) : virtual_memory_(virtual_memory) {}
  std::shared_ptr<allocator_backend> make_backend() override {
    auto be = std::make_shared<fake_backend>(kCapacity);  // real addresses
    if (!virtual_memory_) be->disable_virtual_memory();
    return be;
  }
  stream_handle stream(std::size_t i) override { return 1 + i; }
  void write(void* dst, const void* src, std::size_t n, stream_handle /*s*/) override {
    std::memcpy(dst, src, n);
  }
  void read(void* dst, const void* src, std::size_t n, stream_handle /*s*/) override {
    std::memcpy(dst, src, n);
  }

 private:
  static constexpr std::size_t kCapacity = std::size_t{1} << 30;
  bool virtual_memory_;
};

allocator_contract_param fake(std::string name, allocator_options o, bool virtual_memory = true) {
  return {std::move(name),
          [virtual_memory] { return std::make_unique<fake_harness>(virtual_memory); }, o};
}

allocator_options with(void (*change)(allocator_options&)) {
  allocator_options o;
  change(o);
  return o;
}

}  // namespace

INSTANTIATE_TEST_SUITE_P(
    Fake, AllocatorContract,
    ::testing::Values(fake("plain", {}), fake("no_thread_cache", with([](allocator_options& o) {
                                                o.thread_cache_blocks = 0;
                                              })),
                      fake("roundup_power2",
                           with([](allocator_options& o) { o.roundup_power2_divisions.fill(4); })),
                      fake("expandable",
                           with([](allocator_options& o) { o.expandable_segments = true; })),
                      fake("expandable_eager", with([](allocator_options& o) {
                             o.expandable_segments = true;
                             o.release_pages = page_release::eager;
                           })),
                      fake("expandable_deferred", with([](allocator_options& o) {
                             o.expandable_segments = true;
                             o.release_pages = page_release::deferred;
                           })),
                      fake("expandable_without_virtual_memory",
                           with([](allocator_options& o) { o.expandable_segments = true; }),
                           /*virtual_memory=*/false)),
    contract_param_name);

}  // namespace gpu_basics::contract
