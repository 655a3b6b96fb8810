/* The C ABI of libgpu_basics_torch_alloc.so from plain C, on a machine that sees no GPU (the test
 * hides any with CUDA_VISIBLE_DEVICES=""): every call returns its documented failure, keeps a
 * message, and nothing crashes or throws (gpu_basics_torch_alloc, which throws, is called for
 * size 0 only: tests/torch_alloc/test_throw.cpp covers its failures).
 *   test_c_abi defaults   GPU_BASICS_ALLOC_CONF unset
 *   test_c_abi bad_conf   GPU_BASICS_ALLOC_CONF set to something that does not parse
 *   test_c_abi advise SNAPSHOT ADVICE.json LIMIT DEVICE_MEMORY
 *                         gpu_basics_torch_advise on the snapshot's bytes prints the line that
 *                         `gpu-basics advise SNAPSHOT --fit LIMIT --device-memory DEVICE_MEMORY
 *                         --json ADVICE.json` wrote (tests/cmake/advise_abi.cmake runs both) */
#include <stdio.h>
#include <stdlib.h>
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

/* The whole file at `path` (malloc'd, *n its size), or NULL. */
static char* read_all(const char* path, size_t* n) {
  FILE* f = fopen(path, "rb");
  char* buf = NULL;
  long size = 0;
  if (!f) return NULL;
  if (fseek(f, 0, SEEK_END) == 0 && (size = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0 &&
      (buf = (char*)malloc((size_t)size + 1)) != NULL) {
    *n = fread(buf, 1, (size_t)size, f);
    buf[*n] = '\0';
  }
  fclose(f);
  return buf;
}

/* The line of `json` holding `"key": ` (both documents are written with the same indentation),
 * copied into out; 0 where there is none. */
static int line_of(const char* json, const char* key, char* out, size_t len) {
  char pattern[64];
  const char* at;
  size_t n;
  snprintf(pattern, sizeof pattern, "\"%s\": ", key);
  at = json ? strstr(json, pattern) : NULL;
  if (!at) return 0;
  n = strcspn(at, "\n");
  if (n >= len) n = len - 1;
  memcpy(out, at, n);
  out[n] = '\0';
  return 1;
}

static int oom_calls = 0;
static void on_oom(int device, size_t size, size_t allowed, size_t device_free) {
  (void)device, (void)size, (void)allowed, (void)device_free;
  ++oom_calls;
}

/* Bytes that are not a snapshot, bad options and NULLs: an error code and one line, never a
 * crash. */
static void advise_refusals(const char* snapshot, size_t n) {
  char* json = (char*)1;
  char* text = (char*)1;
  const char junk[] = "not a pickle at all";
  CHECK(gpu_basics_torch_advise(junk, sizeof junk, NULL, &json, &text) ==
        GPU_BASICS_TORCH_EINVAL);
  CHECK(json == NULL && text == NULL);
  CHECK(contains(gpu_basics_torch_last_error(), "advise: snapshot"));
  CHECK(strchr(gpu_basics_torch_last_error(), '\n') == NULL);
  CHECK(gpu_basics_torch_advise(junk, 0, NULL, &json, NULL) == GPU_BASICS_TORCH_EINVAL);
  CHECK(contains(gpu_basics_torch_last_error(), "no snapshot bytes"));
  CHECK(gpu_basics_torch_advise(junk, sizeof junk, NULL, NULL, NULL) == GPU_BASICS_TORCH_EINVAL);
  CHECK(contains(gpu_basics_torch_last_error(), "out_json is NULL"));
  if (!snapshot) return;
  /* cut short: a truncated pickle */
  CHECK(gpu_basics_torch_advise(snapshot, n / 2, NULL, &json, &text) == GPU_BASICS_TORCH_EINVAL);
  CHECK(json == NULL && text == NULL);
  CHECK(strlen(gpu_basics_torch_last_error()) > 10);
  CHECK(gpu_basics_torch_advise(snapshot, n, "{\"limit\": 5}", &json, NULL) ==
        GPU_BASICS_TORCH_EINVAL);
  CHECK(contains(gpu_basics_torch_last_error(), "unknown key \"limit\""));
  CHECK(gpu_basics_torch_advise(snapshot, n, "{\"limit_bytes\": -5}", &json, NULL) ==
        GPU_BASICS_TORCH_EINVAL);
  CHECK(contains(gpu_basics_torch_last_error(), "limit_bytes"));
  CHECK(gpu_basics_torch_advise(snapshot, n, "[1", &json, NULL) == GPU_BASICS_TORCH_EINVAL);
  CHECK(contains(gpu_basics_torch_last_error(), "not a JSON object"));
  CHECK(gpu_basics_torch_advise(snapshot, n, "{\"device\": 3}", &json, NULL) ==
        GPU_BASICS_TORCH_EINVAL);
  CHECK(contains(gpu_basics_torch_last_error(), "no trace of device 3"));
}

static int advise_against_cli(char** argv) {
  size_t n = 0, m = 0;
  char options[256];
  char want[1024], got[1024];
  char* json = NULL;
  char* text = NULL;
  char* snapshot = read_all(argv[2], &n);
  char* cli = read_all(argv[3], &m);
  const char* keys[] = {"torch_env", "use_conf", "gbt", "line_limit_bytes", "live_peak_bytes"};
  size_t k;
  CHECK(snapshot != NULL && cli != NULL);
  if (!snapshot || !cli) return 1;
  snprintf(options, sizeof options, "{\"limit_bytes\": %s, \"device_memory_bytes\": %s}",
           argv[4], argv[5]);
  CHECK(gpu_basics_torch_advise(snapshot, n, options, &json, &text) == GPU_BASICS_TORCH_OK);
  CHECK(contains(json, "\"command\": \"advise\""));
  CHECK(contains(text, "Advice for snapshot"));
  CHECK(contains(text, "export PYTORCH_CUDA_ALLOC_CONF="));
  for (k = 0; k < sizeof keys / sizeof keys[0]; ++k) {
    CHECK(line_of(cli, keys[k], want, sizeof want));
    CHECK(line_of(json, keys[k], got, sizeof got));
    if (strcmp(want, got) != 0) {
      fprintf(stderr, "advise --json: %s\ngpu_basics_torch_advise: %s\n", want, got);
      ++failures;
    }
  }
  CHECK(line_of(json, "torch_env", got, sizeof got) && contains(got, "PYTORCH_CUDA_ALLOC_CONF"));
  gpu_basics_torch_free_string(json);
  gpu_basics_torch_free_string(text);
  gpu_basics_torch_free_string(NULL);
  advise_refusals(snapshot, n);
  free(snapshot);
  free(cli);
  if (failures) fprintf(stderr, "%d check(s) failed\n", failures);
  return failures ? 1 : 0;
}

int main(int argc, char** argv) {
  if (argc > 5 && strcmp(argv[1], "advise") == 0) return advise_against_cli(argv);
  const int bad_conf = argc > 1 && strcmp(argv[1], "bad_conf") == 0;
  gpu_basics_torch_stats_t st;
  char conf[256];
  size_t base_size = 1;

  CHECK(gpu_basics_torch_abi_version() == GPU_BASICS_TORCH_ABI_VERSION);
  CHECK(strcmp(gpu_basics_torch_last_error(), "") == 0);

  /* size 0 is NULL without an error, as PyTorch's own allocator (alloc does not throw for it) */
  CHECK(gpu_basics_torch_alloc(0, 0, NULL) == NULL);
  CHECK(gpu_basics_torch_try_alloc(0, 0, NULL) == NULL);
  CHECK(strcmp(gpu_basics_torch_last_error(), "") == 0);

  /* built without PyTorch: out of memory is a std::bad_alloc */
  CHECK(contains(gpu_basics_torch_build_info(), "\"oom_exception\": \"std::bad_alloc\""));
  CHECK(contains(gpu_basics_torch_build_info(), "\"torch\": null"));

  /* a conf string is checked without being used */
  CHECK(gpu_basics_torch_check_conf("expandable_segments:True,page_release:deferred", conf,
                                    sizeof conf) > 0);
  CHECK(strcmp(conf, "expandable_segments:True,page_release:deferred") == 0);
  CHECK(gpu_basics_torch_check_conf("max_split_size_mb:3", conf, sizeof conf) ==
        GPU_BASICS_TORCH_EINVAL);
  CHECK(contains(gpu_basics_torch_last_error(), "max_split_size_mb"));
  CHECK(gpu_basics_torch_check_conf("page_release:lazy", conf, sizeof conf) ==
        GPU_BASICS_TORCH_EINVAL);
  CHECK(contains(gpu_basics_torch_last_error(), "page_release"));

  if (bad_conf) {
    CHECK(gpu_basics_torch_conf(conf, sizeof conf) == GPU_BASICS_TORCH_EINVAL);
    CHECK(contains(gpu_basics_torch_last_error(), "GPU_BASICS_ALLOC_CONF"));
    CHECK(gpu_basics_torch_try_alloc(1024, 0, NULL) == NULL);
    CHECK(contains(gpu_basics_torch_last_error(), "GPU_BASICS_ALLOC_CONF"));
    /* set again, well: the environment's string is replaced */
    CHECK(gpu_basics_torch_configure("expandable_segments:True", 0) == GPU_BASICS_TORCH_OK);
    CHECK(gpu_basics_torch_conf(conf, sizeof conf) > 0);
    CHECK(strcmp(conf, "expandable_segments:True") == 0);
    return failures ? 1 : 0;
  }

  CHECK(gpu_basics_torch_conf(conf, sizeof conf) == 0);
  CHECK(strcmp(conf, "") == 0);
  CHECK(gpu_basics_torch_configure("roundup_power2_divisions:x", 0) == GPU_BASICS_TORCH_EINVAL);
  CHECK(contains(gpu_basics_torch_last_error(), "roundup_power2_divisions"));
  CHECK(gpu_basics_torch_conf(conf, sizeof conf) == 0); /* unchanged */
  CHECK(gpu_basics_torch_record_history(0, 100) == GPU_BASICS_TORCH_OK);
  CHECK(gpu_basics_torch_record_history(-3, 100) == GPU_BASICS_TORCH_EINVAL);
  CHECK(gpu_basics_torch_stats_json(0, conf, sizeof conf) == 4);
  CHECK(strcmp(conf, "null") == 0);
  CHECK(gpu_basics_torch_stats_json(64, conf, sizeof conf) == GPU_BASICS_TORCH_EINVAL);

  /* no GPU: the allocation fails with a reason */
  CHECK(gpu_basics_torch_try_alloc(1024, 0, NULL) == NULL);
  CHECK(contains(gpu_basics_torch_last_error(), "alloc(1024 bytes, device 0)"));
  CHECK(gpu_basics_torch_try_alloc(1024, 99, NULL) == NULL);
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

  advise_refusals(NULL, 0);
  CHECK(gpu_basics_torch_set_oom_callback(on_oom) == GPU_BASICS_TORCH_OK);
  CHECK(gpu_basics_torch_try_alloc(1024, 0, NULL) == NULL); /* no GPU: not out of memory */
  CHECK(oom_calls == 0);
  CHECK(gpu_basics_torch_set_oom_callback(NULL) == GPU_BASICS_TORCH_OK);

  if (failures) fprintf(stderr, "%d check(s) failed\n", failures);
  return failures ? 1 : 0;
}
