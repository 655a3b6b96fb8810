/* The C ABI of libgpu_basics_torch_alloc.so from plain C, on a machine that sees no GPU (the test
 * hides any with CUDA_VISIBLE_DEVICES=""): every call returns its documented failure, keeps a
 * message, and nothing crashes or throws.
 *   test_c_abi defaults   GPU_BASICS_ALLOC_CONF unset
 *   test_c_abi bad_conf   GPU_BASICS_ALLOC_CONF set to something that does not parse */
#include <stdio.h>
#include <string.h>

#include "gpu_basics/torch_alloc.h"

static int failures = 0;

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                              \
    }                                                                          \
  } while (0)

static int contains(const char* s, const char* part) {
  return s && strstr(s, part) != NULL;
}

int main(int argc, char** argv) {
  const int bad_conf = argc > 1 && strcmp(argv[1], "bad_conf") == 0;
  gpu_basics_torch_stats_t st;
  char conf[256];
  size_t base_size = 1;

  CHECK(gpu_basics_torch_abi_version() == GPU_BASICS_TORCH_ABI_VERSION);
  CHECK(strcmp(gpu_basics_torch_last_error(), "") == 0);

  /* size 0 is NULL without an error, as PyTorch's own allocator */
  CHECK(gpu_basics_torch_alloc(0, 0, NULL) == NULL);
  CHECK(strcmp(gpu_basics_torch_last_error(), "") == 0);

  if (bad_conf) {
    CHECK(gpu_basics_torch_conf(conf, sizeof conf) == GPU_BASICS_TORCH_EINVAL);
    CHECK(contains(gpu_basics_torch_last_error(), "GPU_BASICS_ALLOC_CONF"));
    CHECK(gpu_basics_torch_alloc(1024, 0, NULL) == NULL);
    CHECK(contains(gpu_basics_torch_last_error(), "GPU_BASICS_ALLOC_CONF"));
    return failures ? 1 : 0;
  }

  CHECK(gpu_basics_torch_conf(conf, sizeof conf) == 0);
  CHECK(strcmp(conf, "") == 0);

  /* no GPU: the allocation fails with a reason */
  CHECK(gpu_basics_torch_alloc(1024, 0, NULL) == NULL);
  CHECK(contains(gpu_basics_torch_last_error(), "alloc(1024 bytes, device 0)"));
  CHECK(gpu_basics_torch_alloc(1024, 99, NULL) == NULL);
  CHECK(contains(gpu_basics_torch_last_error(), "out of range"));

  /* statistics of a device without an allocator: all zero */
  memset(&st, 0xff, sizeof st);
  CHECK(gpu_basics_torch_stats(0, &st) == GPU_BASICS_TORCH_OK);
  CHECK(st.reserved_peak == 0 && st.allocated_current == 0 && st.fragmentation == 0.0);
  CHECK(gpu_basics_torch_stats(-1, &st) == GPU_BASICS_TORCH_EINVAL);
  CHECK(gpu_basics_torch_stats(0, NULL) == GPU_BASICS_TORCH_EINVAL);
  CHECK(gpu_basics_torch_reset_peak(0) == GPU_BASICS_TORCH_OK);
  CHECK(gpu_basics_torch_reset_peak(1000) == GPU_BASICS_TORCH_EINVAL);

  /* frees of nothing, or of what this library never handed out: no crash, a message */
  gpu_basics_torch_free(NULL, 0, 0, NULL);
  gpu_basics_torch_free((void*)&st, sizeof st, 0, NULL);
  CHECK(contains(gpu_basics_torch_last_error(), "free("));
  gpu_basics_torch_record_stream((void*)&st, NULL);
  CHECK(contains(gpu_basics_torch_last_error(), "record_stream("));
  CHECK(gpu_basics_torch_base_alloc((void*)&st, &base_size) == NULL);
  CHECK(base_size == 0);

  gpu_basics_torch_empty_cache();
  gpu_basics_torch_init(1);
  gpu_basics_torch_set_memory_fraction(1.5, 0);
  CHECK(contains(gpu_basics_torch_last_error(), "fraction must be in (0, 1]"));
  gpu_basics_torch_set_memory_fraction(0.5, 0); /* before any allocator: accepted */

  CHECK(gpu_basics_torch_write_snapshot(0, NULL) == GPU_BASICS_TORCH_EINVAL);
  CHECK(gpu_basics_torch_write_snapshot(0, "never_written.pickle") == GPU_BASICS_TORCH_EINVAL);
  CHECK(contains(gpu_basics_torch_last_error(), "has no allocator yet"));

  if (failures) fprintf(stderr, "%d check(s) failed\n", failures);
  return failures ? 1 : 0;
}
