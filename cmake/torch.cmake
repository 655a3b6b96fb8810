# PyTorch, optional, for the PyTorch bridge's tests and peers. Nothing here is required: CI has no
# PyTorch, and everything that needs it is left out (the C++ peer) or skipped with the reason (the
# Python tests).
#
#   GPU_BASICS_TORCH_PYTHON  a Python whose `import torch` works (default: /opt/torch/.venv/bin/python
#                            where it exists): runs examples/torch_*.py in the `gpu` tests.
#   GPU_BASICS_TORCH_DIR     the torch package folder (site-packages/torch) with include/ and
#                            lib/libc10*.so (default: that Python's torch, or the venv's):
#                            builds bench/bench_allocator_c10.cpp.
#
# Results: GPU_BASICS_TORCH_PYTHON_OK (and GPU_BASICS_TORCH_PYTHON_WHY when not),
# GPU_BASICS_TORCH_CXX11_ABI (that torch's _GLIBCXX_USE_CXX11_ABI, where the Python ran), and the
# imported target gpu_basics::c10 (c10 + c10_cuda, headers as system headers) when found.

set(_gpu_basics_default_python "")
if(EXISTS /opt/torch/.venv/bin/python)
  set(_gpu_basics_default_python /opt/torch/.venv/bin/python)
endif()
set(GPU_BASICS_TORCH_PYTHON "${_gpu_basics_default_python}" CACHE FILEPATH
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

set(_gpu_basics_default_torch_dir "${_gpu_basics_python_torch_dir}")
if(NOT _gpu_basics_default_torch_dir AND EXISTS /opt/torch/.venv/lib/python3.12/site-packages/torch)
  set(_gpu_basics_default_torch_dir /opt/torch/.venv/lib/python3.12/site-packages/torch)
endif()
set(GPU_BASICS_TORCH_DIR "${_gpu_basics_default_torch_dir}" CACHE PATH
    "The torch package folder (site-packages/torch) for the c10 allocator peer (empty: none)")

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
