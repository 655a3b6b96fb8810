# The library's layers as CMake targets, and the include roots that make a wrong-way include a
# compile error:
#
#   core  <-  memory, transfer, profiler (siblings: none includes another)  <-  lessons  <-  CLI
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

# gpu_basics_add_module(<module> SOURCES ... [DEPENDS <module>...]): the static library
# gpu_basics_<module> (alias and export name gpu_basics::<module>) with its layer include root,
# linked PUBLIC to the modules it DEPENDS on (their headers, and theirs only, become visible).
function(gpu_basics_add_module module)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "SOURCES;DEPENDS")
  set(target gpu_basics_${module})
  add_library(${target} STATIC ${arg_SOURCES})
  add_library(gpu_basics::${module} ALIAS ${target})
  gpu_basics_target_options(${target})
  gpu_basics_layer_includes(${target} ${module})
  target_compile_features(${target} PUBLIC cxx_std_20)
  foreach(dep IN LISTS arg_DEPENDS)
    target_link_libraries(${target} PUBLIC gpu_basics_${dep})
  endforeach()
  set_target_properties(${target} PROPERTIES
    EXPORT_NAME ${module}
    POSITION_INDEPENDENT_CODE ON
    CUDA_SEPARABLE_COMPILATION OFF)
endfunction()
