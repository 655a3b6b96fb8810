// GPU_BASICS_HD marks functions that run on the host and, compiled by nvcc, on the device too.
#pragma once

#if defined(__CUDACC__)
#define GPU_BASICS_HD __host__ __device__
#else
#define GPU_BASICS_HD
#endif
