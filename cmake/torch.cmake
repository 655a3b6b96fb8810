# PyTorch, optional, for the PyTorch bridge's tests and peers. Nothing here is required: CI has no
# PyTorch, and everything that needs it is left out (the C++ peer) or skipped with the reason (the
# Python tests).
#
#   GPU_BASICS_TORCH_PYTHON  a Python whose `import torch` works (default: the environment
#                            variable of that name at the first configure, else none): runs the
#                            PyTorch tests (`gpu` label), and its torch gives the default of
#   GPU_BASICS_TORCH_DIR     the torch package folder (site-packages/torch) with include/ and
#                            lib/libc10*.so (default: the environment variable, else that
#                            Python's torch, followed when GPU_BASICS_TORCH_PYTHON changes):
#                            builds libgpu_basics_torch_alloc_c10.so and bench_allocator_c10.
#
# No machine's path is assumed: `pip install ./python` passes both for the Python running pip.
#
# Results: GPU_BASICS_TORCH_PYTHON_OK (and GPU_BASICS_TORCH_PYTHON_WHY when not),
# GPU_BASICS_TORCH_CXX11_ABI (that torch's _GLIBCXX_USE_CXX11_ABI, where the Python ran), and the
# imported target gpu_basics::c10 (c10 + c10_cuda, headers as system headers) when found.

set(GPU_BASICS_TORCH_PYTHON "$ENV{GPU_BASICS_TORCH_PYTHON}" CACHE FILEPATH
    "Python with PyTorch for the PyTorch bridge's tests (empty: none)")

set(GPU_BASICS_TORCH_PYTHON_OK FALSE)
set(GPU_BASICS_TORCH_PYTHON_WHY "no Python with PyTorch (set GPU_BASICS_TORCH_PYTHON)")
set(_gpu_basics_python_torch_dir "")
if(GPU_BASICS_TORCH_PYTHON)
  execute_process(
    COMMAND ${GPU_BASICS_TORCH_PYTHON} -c
            "import os, torch; print(torch.__version__); print(os.path.dirname(torch.__file__)); print(int(torch._C._GLIBCXX_USE_CXX11_ABI))"
    RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err
    OUTPUT_STRIP_TRAILING_WHITESPACE TIMEOUT 120)
  if(_rc EQUAL 0)
    string(REPLACE "\n" ";" _out "${_out}")
    list(GET _out 0 _version)
    list(GET _out 1 _gpu_basics_python_torch_dir)
    list(GET _out 2 GPU_BASICS_TORCH_CXX11_ABI)
    set(GPU_BASICS_TORCH_PYTHON_OK TRUE)
    message(STATUS "PyTorch ${_version} for the bridge's tests: ${GPU_BASICS_TORCH_PYTHON}")
  else()
    string(REGEX REPLACE "\n.*" "" _err "${_err}")
    set(GPU_BASICS_TORCH_PYTHON_WHY
        "${GPU_BASICS_TORCH_PYTHON}: `import torch` failed (${_rc}): ${_err}")
    message(STATUS "PyTorch bridge tests will be skipped: ${GPU_BASICS_TORCH_PYTHON_WHY}")
  endif()
else()
  message(STATUS "PyTorch bridge tests will be skipped: ${GPU_BASICS_TORCH_PYTHON_WHY}")
endif()

set(_gpu_basics_default_torch_dir "$ENV{GPU_BASICS_TORCH_DIR}")
if(NOT _gpu_basics_default_torch_dir)
  set(_gpu_basics_default_torch_dir "${_gpu_basics_python_torch_dir}")
endif()
set(GPU_BASICS_TORCH_DIR "${_gpu_basics_default_torch_dir}" CACHE PATH
    "The torch package folder (site-packages/torch) for the c10 allocator peer (empty: none)")
# A folder taken from the Python's torch follows that Python: once GPU_BASICS_TORCH_PYTHON names
# another one, the cached folder would be the old torch's (one set by hand is kept).
if(GPU_BASICS_TORCH_DIR STREQUAL "${_GPU_BASICS_TORCH_DIR_DERIVED}"
   AND NOT GPU_BASICS_TORCH_DIR STREQUAL "${_gpu_basics_default_torch_dir}")
  set_property(CACHE GPU_BASICS_TORCH_DIR PROPERTY VALUE "${_gpu_basics_default_torch_dir}")
endif()
set(_GPU_BASICS_TORCH_DIR_DERIVED "${_gpu_basics_default_torch_dir}" CACHE INTERNAL "")
# find_library keeps what it found in the cache: found under another torch, look again.
foreach(_lib GPU_BASICS_C10_LIBRARY GPU_BASICS_C10_CUDA_LIBRARY)
  get_filename_component(_found_in "${${_lib}}" DIRECTORY)
  if(DEFINED CACHE{${_lib}} AND NOT _found_in STREQUAL "${GPU_BASICS_TORCH_DIR}/lib")
    unset(${_lib} CACHE)
  endif()
endforeach()

if(GPU_BASICS_TORCH_DIR AND NOT TARGET gpu_basics::c10)
  find_library(GPU_BASICS_C10_LIBRARY c10 PATHS ${GPU_BASICS_TORCH_DIR}/lib NO_DEFAULT_PATH)
  find_library(GPU_BASICS_C10_CUDA_LIBRARY c10_cuda PATHS ${GPU_BASICS_TORCH_DIR}/lib
               NO_DEFAULT_PATH)
  if(GPU_BASICS_C10_LIBRARY AND GPU_BASICS_C10_CUDA_LIBRARY
     AND EXISTS ${GPU_BASICS_TORCH_DIR}/include/c10/cuda/CUDACachingAllocator.h)
    add_library(gpu_basics::c10 INTERFACE IMPORTED)
    target_include_directories(gpu_basics::c10 SYSTEM INTERFACE ${GPU_BASICS_TORCH_DIR}/include)
    target_link_libraries(gpu_basics::c10 INTERFACE ${GPU_BASICS_C10_CUDA_LIBRARY}
                          ${GPU_BASICS_C10_LIBRARY} CUDA::cudart)
    target_link_options(gpu_basics::c10 INTERFACE "-Wl,-rpath,${GPU_BASICS_TORCH_DIR}/lib")
    message(STATUS "c10 allocator peer: ${GPU_BASICS_TORCH_DIR}")
  else()
    message(STATUS "c10 allocator peer not built: no lib/libc10*.so and headers under "
                   "GPU_BASICS_TORCH_DIR=${GPU_BASICS_TORCH_DIR}")
  endif()
elseif(NOT GPU_BASICS_TORCH_DIR)
  message(STATUS "c10 allocator peer not built: set GPU_BASICS_TORCH_DIR to site-packages/torch")
endif()
