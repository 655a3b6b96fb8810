# Host-code warnings (errors by default). Device code is compiled by nvcc without -Werror:
# its front end warns on system headers we do not own.
set(GPU_BASICS_CXX_WARNINGS -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion
    -Wnon-virtual-dtor -Wold-style-cast -Wcast-align -Wunused -Woverloaded-virtual
    -Wdouble-promotion -Wformat=2 -Wimplicit-fallthrough)
# GCC 12-13 report -Wrestrict false positives inside std::string concatenation (GCC bug 105329).
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  list(APPEND GPU_BASICS_CXX_WARNINGS -Wno-restrict)
endif()
if(GPU_BASICS_WERROR)
  list(APPEND GPU_BASICS_CXX_WARNINGS -Werror)
  # GCC 12 at -O2/-O3 flags std::variant<..., std::string> copies as maybe-uninitialized (GCC bug
  # 107138 and kin): still shown, not fatal.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    list(APPEND GPU_BASICS_CXX_WARNINGS -Wno-error=maybe-uninitialized)
  endif()
  # GCC 13 flags a reference bound to a function's result whenever an argument was a temporary
  # (-Wdangling-reference, many false positives): shown, not fatal.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_GREATER_EQUAL 13)
    list(APPEND GPU_BASICS_CXX_WARNINGS -Wno-error=dangling-reference)
  endif()
endif()

function(gpu_basics_target_options target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:${GPU_BASICS_CXX_WARNINGS}>
    $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -Xcompiler=-Wall>)
  if(GPU_BASICS_SANITIZE_THREAD)
    target_compile_options(${target} PRIVATE
      $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=thread -fno-omit-frame-pointer>)
    target_link_options(${target} PRIVATE -fsanitize=thread)
  endif()
  if(GPU_BASICS_SANITIZE)
    target_compile_options(${target} PRIVATE
      $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined>)
    target_link_options(${target} PRIVATE -fsanitize=address,undefined)
  endif()
endfunction()
