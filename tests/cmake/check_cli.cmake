# Runs the gpu-basics binary the way a user would and checks exit code, messages and files.
# -DEXE=<binary> -DWORK=<scratch dir> -DMODE=no_gpu|bad_config
file(REMOVE_RECURSE ${WORK}/${MODE})
file(MAKE_DIRECTORY ${WORK}/${MODE})
set(dir ${WORK}/${MODE})

function(expect_run expected_rc stderr_regex)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc STREQUAL "${expected_rc}")
    message(FATAL_ERROR "${ARGN}: exit ${rc}, expected ${expected_rc}\nstdout: ${out}\nstderr: ${err}")
  endif()
  if(NOT err MATCHES "${stderr_regex}")
    message(FATAL_ERROR "${ARGN}: stderr does not match '${stderr_regex}':\n${err}")
  endif()
  string(REGEX MATCHALL "\n" lines "${err}")
  list(LENGTH lines n)
  if(expected_rc GREATER 1 AND n GREATER 1)
    message(FATAL_ERROR "${ARGN}: expected one error line, got ${n}:\n${err}")
  endif()
  set(last_out "${out}" PARENT_SCOPE)
endfunction()

if(MODE STREQUAL "no_gpu")
  foreach(cmd info all memory)
    expect_run(3 "^gpu-basics: no NVIDIA GPU visible: "
               ${CMAKE_COMMAND} -E env CUDA_VISIBLE_DEVICES= ${EXE} ${cmd} --json ${dir}/${cmd}.json)
    if(EXISTS ${dir}/${cmd}.json)
      message(FATAL_ERROR "${cmd}: wrote ${dir}/${cmd}.json although it failed")
    endif()
  endforeach()
elseif(MODE STREQUAL "bad_config")
  file(WRITE ${dir}/bad.yaml "transfer:\n  num_streams: four\n")
  # Config errors are found before any GPU is touched: the same answer with or without one.
  expect_run(2 "bad.yaml:2:16: transfer.num_streams: expected an integer in 1..64, got \"four\""
             ${CMAKE_COMMAND} -E env CUDA_VISIBLE_DEVICES= ${EXE} transfer --config ${dir}/bad.yaml)
  expect_run(2 "--set: transfer.num_streams: expected an integer in 1..64, got 100"
             ${EXE} info --set transfer.num_streams=100)
  expect_run(2 "missing.yaml: cannot read the configuration file"
             ${EXE} info --config ${dir}/missing.yaml)
  expect_run(2 "unknown key; did you mean 'transfer.num_streams'"
             ${EXE} info --set transfer.num_stream=3)
  expect_run(2 "--log-level: expected one of" ${EXE} info --log-level loud)
  expect_run(2 "gpu-basics: " ${EXE} frobnicate)
  expect_run(0 "" ${EXE} info --help)
  if(NOT last_out MATCHES "--config" OR NOT last_out MATCHES "--json")
    message(FATAL_ERROR "info --help does not list --config and --json:\n${last_out}")
  endif()
endif()
