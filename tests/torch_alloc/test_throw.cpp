// gpu_basics_torch_alloc, PyTorch's alloc_fn, never returns NULL for a failure: it throws, since
// PyTorch does not check the pointer. Built without PyTorch's headers, a failure that is not out
// of memory is a std::runtime_error naming it (RuntimeError in Python), never a std::bad_alloc
// (kept for out of memory). Run with no GPU visible (CUDA_VISIBLE_DEVICES="").
#include <cstdio>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>

#include "gpu_basics/torch_alloc.h"

namespace {
int failures = 0;
void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "CHECK failed: %s\n", what);
    ++failures;
  }
}

/// The message of what alloc threw, or "" when it returned.
std::string thrown(std::size_t size, int device, bool& was_bad_alloc) {
  was_bad_alloc = false;
  try {
    void* p = gpu_basics_torch_alloc(size, device, nullptr);
    return p ? "returned a pointer" : "returned NULL";
  } catch (const std::bad_alloc& e) {
    was_bad_alloc = true;
    return e.what();
  } catch (const std::runtime_error& e) {
    return e.what();
  }
}
}  // namespace

int main() {
  bool bad_alloc = false;
  std::string m = thrown(1024, 0, bad_alloc);  // no GPU
  std::printf("no GPU: %s\n", m.c_str());
  check(!bad_alloc, "no device is not out of memory");
  check(m.find("alloc(1024 bytes, device 0)") != std::string::npos, "names the call");
  check(std::strstr(gpu_basics_torch_last_error(), "alloc(1024 bytes") != nullptr,
        "kept as the last error");
  m = thrown(1024, 77, bad_alloc);
  check(!bad_alloc && m.find("out of range") != std::string::npos, "device out of range");
  check(gpu_basics_torch_configure("expandable_segments:Maybe", 0) == GPU_BASICS_TORCH_EINVAL,
        "bad conf refused");
  m = thrown(1, 0, bad_alloc);
  check(m.find("returned") == std::string::npos, "never returns for a failure");
  check(gpu_basics_torch_alloc(0, 0, nullptr) == nullptr, "size 0 is NULL, not thrown");
  if (failures) std::fprintf(stderr, "%d check(s) failed\n", failures);
  return failures ? 1 : 0;
}
