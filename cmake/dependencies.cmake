# Every dependency comes from its distribution package (Debian/Ubuntu) or the CUDA toolkit.
# NVML is not linked: it is loaded with dlopen at run time.
if(NOT GPU_BASICS_HOST_ONLY)
  find_package(CUDAToolkit REQUIRED)
endif()
find_package(yaml-cpp REQUIRED)
find_package(fmt REQUIRED)
find_package(spdlog REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(Threads REQUIRED)
# zlib is optional: without it, traces cannot be written gzip-compressed (".gz").
find_package(ZLIB)
if(GPU_BASICS_BUILD_APPS OR GPU_BASICS_BUILD_TESTS)
  find_package(CLI11 2.1 REQUIRED)
endif()
if(GPU_BASICS_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
if(GPU_BASICS_BUILD_BENCHMARKS)
  find_package(benchmark REQUIRED)
endif()

# yaml-cpp 0.7 exports `yaml-cpp`, 0.8 `yaml-cpp::yaml-cpp`.
if(TARGET yaml-cpp::yaml-cpp)
  set(GPU_BASICS_YAML_TARGET yaml-cpp::yaml-cpp)
else()
  set(GPU_BASICS_YAML_TARGET yaml-cpp)
endif()
