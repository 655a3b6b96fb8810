#include "gemm_lt.hpp"

#include "gpu_basics/core/errors.hpp"

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <string>
#include <vector>

#include "gpu_basics/core/pattern.hpp"

namespace gpu_basics::detail {

namespace {

const char* status_name(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    default:
      return "CUBLAS_STATUS_UNKNOWN";
  }
}

#define GPU_BASICS_LT_TRY(call)                                                                  \
  do {                                                                                           \
    const cublasStatus_t lt_status_ = (call);                                                    \
    if (lt_status_ != CUBLAS_STATUS_SUCCESS)                                                     \
      throw cuda_error(static_cast<int>(lt_status_), status_name(lt_status_), "cuBLASLt failed", \
                       #call, __FILE__, __LINE__);                                               \
  } while (0)

cudaDataType_t data_type(int p) {
  return p == 0 ? CUDA_R_16F : p == 1 ? CUDA_R_16BF : CUDA_R_32F;
}
std::size_t element_size(int p) {
  return p <= 1 ? 2 : 4;
}
cublasComputeType_t compute_type(int p) {
  return p == 2 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

template <class T>
__device__ T from_float(float x);
template <>
__device__ __half from_float<__half>(float x) {
  return __float2half(x);
}
template <>
__device__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16(x);
}
template <>
__device__ float from_float<float>(float x) {
  return x;
}

template <class T>
__global__ void fill_normal_kernel(T* p, std::size_t n, std::uint32_t seed) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x) {
    // Box-Muller over two pattern words: N(0, 1), never all zeros.
    const float u1 =
        (static_cast<float>(pattern_word(seed, 2 * i) >> 8) + 1.0f) * (1.0f / 16777217.0f);
    const float u2 = static_cast<float>(pattern_word(seed, 2 * i + 1) >> 8) * (1.0f / 16777216.0f);
    p[i] = from_float<T>(sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2));
  }
}

void fill_normal(void* p, std::size_t n, int prec, std::uint32_t seed, stream_view s) {
  const int blocks = 132 * 8;
  switch (prec) {
    case 0:
      fill_normal_kernel<<<blocks, 256, 0, s>>>(static_cast<__half*>(p), n, seed);
      break;
    case 1:
      fill_normal_kernel<<<blocks, 256, 0, s>>>(static_cast<__nv_bfloat16*>(p), n, seed);
      break;
    default:
      fill_normal_kernel<<<blocks, 256, 0, s>>>(static_cast<float*>(p), n, seed);
      break;
  }
  GPU_BASICS_CUDA_TRY(cudaGetLastError());
}

double to_double(const void* base, std::size_t i, int p) {
  switch (p) {
    case 0:
      return static_cast<double>(__half2float(static_cast<const __half*>(base)[i]));
    case 1:
      return static_cast<double>(__bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]));
    default:
      return static_cast<double>(static_cast<const float*>(base)[i]);
  }
}

/// The descriptors of one (precision, shape): owned, destroyed together.
struct descriptors {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  descriptors(int p, std::uint64_t m, std::uint64_t n, std::uint64_t k) {
    GPU_BASICS_LT_TRY(cublasLtMatmulDescCreate(&op, compute_type(p), CUDA_R_32F));
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    GPU_BASICS_LT_TRY(
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    GPU_BASICS_LT_TRY(
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    const cudaDataType_t t = data_type(p);
    // A is stored k x m (op T gives m x k), B k x n, D m x n; all column-major.
    GPU_BASICS_LT_TRY(cublasLtMatrixLayoutCreate(&a, t, k, m, static_cast<std::int64_t>(k)));
    GPU_BASICS_LT_TRY(cublasLtMatrixLayoutCreate(&b, t, k, n, static_cast<std::int64_t>(k)));
    GPU_BASICS_LT_TRY(cublasLtMatrixLayoutCreate(&d, t, m, n, static_cast<std::int64_t>(m)));
  }
  ~descriptors() {
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
  descriptors(const descriptors&) = delete;
  descriptors& operator=(const descriptors&) = delete;
};

}  // namespace

struct lt_gemm::impl {
  cublasLtHandle_t handle = nullptr;
  device_buffer workspace;
  int prec = -1;
  std::uint64_t m = 0, n = 0, k = 0;
  device_buffer a, b, d;
  std::unique_ptr<descriptors> ds;
  std::vector<cublasLtMatmulHeuristicResult_t> candidates;

  void matmul(const cublasLtMatmulAlgo_t& algo, stream_view st) {
    const float alpha = 1.0f, beta = 0.0f;
    GPU_BASICS_LT_TRY(cublasLtMatmul(handle, ds->op, &alpha, a.data(), ds->a, b.data(), ds->b,
                                     &beta, d.data(), ds->d, d.data(), ds->d, &algo,
                                     workspace.data(), workspace.size(), st.value()));
  }
};

lt_gemm::lt_gemm(std::size_t workspace_bytes) : impl_(std::make_unique<impl>()) {
  GPU_BASICS_LT_TRY(cublasLtCreate(&impl_->handle));
  impl_->workspace = device_buffer(workspace_bytes);
}

lt_gemm::~lt_gemm() {
  impl_->ds.reset();
  if (impl_->handle) cublasLtDestroy(impl_->handle);
}

int lt_gemm::prepare(int precision, std::uint64_t m, std::uint64_t n, std::uint64_t k,
                     int max_candidates, stream_view s) {
  auto& x = *impl_;
  if (x.prec != precision || x.m != m || x.n != n || x.k != k) {
    const std::size_t e = element_size(precision);
    x.a = device_buffer();
    x.b = device_buffer();
    x.d = device_buffer();
    x.a = device_buffer(k * m * e);
    x.b = device_buffer(k * n * e);
    x.d = device_buffer(m * n * e);
    fill_normal(x.a.data(), k * m, precision, 11, s);
    fill_normal(x.b.data(), k * n, precision, 12, s);
    s.synchronize();
    x.ds = std::make_unique<descriptors>(precision, m, n, k);
    x.prec = precision;
    x.m = m;
    x.n = n;
    x.k = k;
    cublasLtMatmulPreference_t pref = nullptr;
    GPU_BASICS_LT_TRY(cublasLtMatmulPreferenceCreate(&pref));
    const std::uint64_t ws = x.workspace.size();
    const cublasStatus_t ps = cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
    x.candidates.assign(static_cast<std::size_t>(max_candidates),
                        cublasLtMatmulHeuristicResult_t{});
    int returned = 0;
    const cublasStatus_t hs =
        ps != CUBLAS_STATUS_SUCCESS
            ? ps
            : cublasLtMatmulAlgoGetHeuristic(x.handle, x.ds->op, x.ds->a, x.ds->b, x.ds->d, x.ds->d,
                                             pref, max_candidates, x.candidates.data(), &returned);
    cublasLtMatmulPreferenceDestroy(pref);
    GPU_BASICS_LT_TRY(hs);
    x.candidates.resize(static_cast<std::size_t>(returned));
  }
  return static_cast<int>(x.candidates.size());
}

std::vector<double> lt_gemm::time_candidate(int c, int reps, stream_view s) {
  auto& x = *impl_;
  std::vector<double> t;
  const auto& r = x.candidates.at(static_cast<std::size_t>(c));
  if (r.state != CUBLAS_STATUS_SUCCESS) return t;
  try {
    cuda_event start, stop;
    x.matmul(r.algo, s);
    for (int i = 0; i < reps; ++i) {
      start.record(s);
      x.matmul(r.algo, s);
      stop.record(s);
      stop.synchronize();
      t.push_back(cuda_event::elapsed_s(start, stop));
    }
  } catch (const cuda_error&) {
    t.clear();  // this candidate cannot run here
  }
  return t;
}

std::vector<double> lt_gemm::run(int c, int warmup, int iterations, stream_view s) {
  auto& x = *impl_;
  const auto& algo = x.candidates.at(static_cast<std::size_t>(c)).algo;
  for (int i = 0; i < warmup; ++i) x.matmul(algo, s);
  std::vector<cuda_event> start(static_cast<std::size_t>(iterations)),
      stop(static_cast<std::size_t>(iterations));
  for (std::size_t i = 0; i < start.size(); ++i) {
    start[i].record(s);
    x.matmul(algo, s);
    stop[i].record(s);
  }
  s.synchronize();
  std::vector<double> t;
  for (std::size_t i = 0; i < start.size(); ++i)
    t.push_back(cuda_event::elapsed_s(start[i], stop[i]));
  return t;
}

void lt_gemm::download(std::vector<double>& a, std::vector<double>& b,
                       std::vector<double>& d) const {
  const auto& x = *impl_;
  const std::size_t e = element_size(x.prec);
  const auto fetch = [&](const device_buffer& buf, std::vector<double>& out) {
    std::vector<unsigned char> raw(buf.size());
    GPU_BASICS_CUDA_TRY(cudaMemcpy(raw.data(), buf.data(), raw.size(), cudaMemcpyDeviceToHost));
    out.resize(raw.size() / e);
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = to_double(raw.data(), i, x.prec);
  };
  fetch(x.a, a);
  fetch(x.b, b);
  fetch(x.d, d);
}

}  // namespace gpu_basics::detail
