# A host-only build (GPU_BASICS_HOST_ONLY) needs no CUDA: the CLI's shared libraries (ldd) include
# no CUDA runtime, driver, cuBLAS, CUPTI, NVML or NVTX, and the build knows no CUDA compiler.
# -DEXE=<gpu-basics> -DBUILD=<build tree>
execute_process(COMMAND ldd ${EXE} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "ldd ${EXE} failed (${rc}): ${err}")
endif()
message(STATUS "ldd ${EXE}:\n${out}")
string(REGEX MATCHALL "[^\n]*(libcuda|libcudart|libcublas|libcupti|libnvidia|libnvToolsExt|libnccl)[^\n]*"
       cuda "${out}")
if(cuda)
  message(FATAL_ERROR "the host-only CLI links CUDA libraries:\n${cuda}")
endif()
file(STRINGS ${BUILD}/CMakeCache.txt cache REGEX "^(CMAKE_CUDA_COMPILER|CUDAToolkit_[A-Z_]*DIR)[:=]")
foreach(line IN LISTS cache)
  if(NOT line MATCHES "=$" AND NOT line MATCHES "NOTFOUND$")
    message(FATAL_ERROR "the host-only build found CUDA: ${line}")
  endif()
endforeach()
message(STATUS "no CUDA library in the CLI, no CUDA compiler in the build")
