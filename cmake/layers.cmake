# The library's layers as CMake targets, and the include roots that make a wrong-way include a
# compile error:
#
#   core  <-  memory, transfer, profiler (siblings: none includes another)  <-  lessons  <-  CLI
#               memory  <-  snapshot (host-only analysis of PyTorch snapshots)  <-  lessons
#
# All public headers live in one tree, include/gpu_basics/<module>/, and are installed as one
# include/. In the build tree each module gets a root of its own that holds nothing but a link to
# its own folder: layer_include/<module>/gpu_basics/<module> -> include/gpu_basics/<module>. A
# module's sources see that root plus the roots of the modules it links, so
# `#include "gpu_basics/profiler/..."` in core, or ".../transfer/..." in memory, fails with
# "No such file or directory". tests/layering/ shows it (ctest -R layering).

# gpu_basics_layer_includes(<target> <module>): gives <target> (PUBLIC: what links it sees them
# too) the build-tree include root that exposes include/gpu_basics/<module> and nothing else;
# installed, the include root is the one include/.
function(gpu_basics_layer_includes target module)
  set(root ${PROJECT_BINARY_DIR}/layer_include/${module})
  if(NOT IS_DIRECTORY ${PROJECT_SOURCE_DIR}/include/gpu_basics/${module})
    message(FATAL_ERROR "gpu_basics_layer_includes: no include/gpu_basics/${module}")
  endif()
  file(MAKE_DIRECTORY ${root}/gpu_basics)
  file(CREATE_LINK ${PROJECT_SOURCE_DIR}/include/gpu_basics/${module} ${root}/gpu_basics/${module}
       SYMBOLIC)
  target_include_directories(${target} PUBLIC
    $<BUILD_INTERFACE:${root}>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
endfunction()

# Each module is two layers: the host layer (gpu_basics_<module>_host: results, explanations,
# presentations, replay, parsing; no CUDA header, no CUDA library) and, above it, the CUDA edge
# (gpu_basics_<module>: what calls the CUDA runtime, cuBLAS, CUPTI, NVML). A module with no CUDA
# edge (report, verdict) is its host layer under the plain name. A host-only build
# (GPU_BASICS_HOST_ONLY) makes the host layers alone.
#
# Host layers compile with GPU_BASICS_HOST_LAYER defined: every public header whose code needs CUDA
# stops such a compile with an #error that names it (tests/layering/host_includes_cuda.cpp shows
# it), and, as they link no CUDA target, CUDA's own headers are out of their sight too.

# gpu_basics_host_layer(<target>): marks <target> as host-only code (see above).
function(gpu_basics_host_layer target)
  target_compile_definitions(${target} PRIVATE GPU_BASICS_HOST_LAYER=1)
endfunction()

# gpu_basics_host_target(<out-var> <module>): the name of <module>'s host layer.
function(gpu_basics_host_target out module)
  get_property(t GLOBAL PROPERTY GPU_BASICS_HOST_TARGET_${module})
  if(NOT t)
    message(FATAL_ERROR "gpu_basics: module ${module} is not defined (yet)")
  endif()
  set(${out} ${t} PARENT_SCOPE)
endfunction()

function(_gpu_basics_static target module)
  add_library(${target} STATIC ${ARGN})
  gpu_basics_target_options(${target})
  gpu_basics_layer_includes(${target} ${module})
  target_compile_features(${target} PUBLIC cxx_std_20)
  set_target_properties(${target} PROPERTIES POSITION_INDEPENDENT_CODE ON
                                             CUDA_SEPARABLE_COMPILATION OFF)
endfunction()

# gpu_basics_add_module(<module> [HOST_SOURCES ...] [CUDA_SOURCES ...] [DEPENDS <module>...]):
# the host layer from HOST_SOURCES, linked PUBLIC to the host layers of the modules it DEPENDS
# on, and (not in a host-only build) the CUDA edge from CUDA_SOURCES, linked PUBLIC to its own host
# layer and to the modules it DEPENDS on. Aliases and export names: gpu_basics::<module>_host,
# gpu_basics::<module>.
function(gpu_basics_add_module module)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "HOST_SOURCES;CUDA_SOURCES;DEPENDS")
  if(arg_CUDA_SOURCES)
    set(host gpu_basics_${module}_host)
  else()
    set(host gpu_basics_${module})
  endif()
  _gpu_basics_static(${host} ${module} ${arg_HOST_SOURCES})
  gpu_basics_host_layer(${host})
  string(REPLACE "gpu_basics_" "" export_name ${host})
  add_library(gpu_basics::${export_name} ALIAS ${host})
  set_target_properties(${host} PROPERTIES EXPORT_NAME ${export_name})
  foreach(dep IN LISTS arg_DEPENDS)
    gpu_basics_host_target(dep_host ${dep})
    target_link_libraries(${host} PUBLIC ${dep_host})
  endforeach()
  set_property(GLOBAL PROPERTY GPU_BASICS_HOST_TARGET_${module} ${host})
  set_property(GLOBAL APPEND PROPERTY GPU_BASICS_TARGETS ${host})
  if(NOT arg_CUDA_SOURCES OR GPU_BASICS_HOST_ONLY)
    return()
  endif()
  set(target gpu_basics_${module})
  _gpu_basics_static(${target} ${module} ${arg_CUDA_SOURCES})
  add_library(gpu_basics::${module} ALIAS ${target})
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${module})
  target_link_libraries(${target} PUBLIC ${host})
  foreach(dep IN LISTS arg_DEPENDS)
    target_link_libraries(${target} PUBLIC gpu_basics_${dep})
  endforeach()
  set_property(GLOBAL APPEND PROPERTY GPU_BASICS_TARGETS ${target})
endfunction()
