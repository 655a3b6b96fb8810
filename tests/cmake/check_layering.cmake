# Builds one layering probe (tests/layering/) and checks how it ends.
#   EXPECT=fail: the build fails, and for the right reason: HEADER exists in the source tree but
#                the compiler reports it missing ("No such file or directory", or clang's "file not
#                found") from the probe's layer.
#   EXPECT=cuda: the build fails because HEADER, a CUDA header of the library, refuses a host
#                layer by name (its #error).
#   EXPECT=pass: the build succeeds (the control: right-way includes still work).
# -DBUILD=<build tree> -DTARGET=<probe target> -DSOURCE=<source tree> [-DHEADER=gpu_basics/...]
# [-DCONFIG=<config>]
if(EXPECT STREQUAL "cuda" AND NOT EXISTS "${SOURCE}/include/${HEADER}")
  message(FATAL_ERROR "probe ${TARGET}: ${HEADER} does not exist, so its failure would prove nothing")
endif()
if(EXPECT STREQUAL "fail" AND HEADER MATCHES "^gpu_basics/" AND NOT EXISTS "${SOURCE}/include/${HEADER}")
  message(FATAL_ERROR "probe ${TARGET}: ${HEADER} does not exist, so its failure would prove nothing")
endif()
set(config_args)
if(CONFIG)
  set(config_args --config ${CONFIG})
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${BUILD} --target ${TARGET} ${config_args}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(EXPECT STREQUAL "pass")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "control probe ${TARGET} failed to build (it must):\n${out}")
  endif()
  message(STATUS "control probe ${TARGET} built, as it must")
  return()
endif()
if(rc EQUAL 0)
  message(FATAL_ERROR "probe ${TARGET} built, but it includes ${HEADER} the wrong way: the layer "
                      "include roots do not enforce the layering")
endif()
string(REPLACE "." "\\." header_re "${HEADER}")
if(EXPECT STREQUAL "cuda")
  string(REGEX MATCH "[^\n]*${header_re} is a CUDA header: a host-only target may not include it"
         hit "${out}")
  if(NOT hit)
    message(FATAL_ERROR "probe ${TARGET} failed, but not because ${HEADER} refused a host "
                        "layer:\n${out}")
  endif()
  message(STATUS "probe ${TARGET} failed for the right reason:\n  ${hit}")
  return()
endif()
string(REGEX MATCH "[^\n]*${header_re}'?(: No such file or directory| file not found)[^\n]*" hit
       "${out}")
if(NOT hit)
  message(FATAL_ERROR "probe ${TARGET} failed, but not because ${HEADER} is out of its layer's "
                      "sight:\n${out}")
endif()
message(STATUS "probe ${TARGET} failed for the right reason:\n  ${hit}")
