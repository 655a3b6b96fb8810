cmake_minimum_required(VERSION 3.25)
# gpu_basics_torch_advise (the torch allocator library's C ABI) gives the advice `gpu-basics
# advise --json` gives for the same snapshot and options: the CLI writes its JSON, then the C
# test advises on the snapshot's bytes and compares the printed line.
#   cmake -DEXE=<gpu-basics> -DTEST=<gpu_basics_torch_alloc_c_abi> -DSNAPSHOT=<pickle>
#         -DWORK=<dir> -P advise_abi.cmake
set(limit 251658240)           # 240 MiB: below the defaults' peak, so the line sets a fraction
set(device_memory 150000000000)
file(MAKE_DIRECTORY ${WORK})
execute_process(COMMAND ${EXE} advise ${SNAPSHOT} --fit ${limit} --device-memory ${device_memory}
                        --json ${WORK}/advice.json
                OUTPUT_QUIET RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "gpu-basics advise failed (${rc})")
endif()
execute_process(COMMAND ${TEST} advise ${SNAPSHOT} ${WORK}/advice.json ${limit} ${device_memory}
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "gpu_basics_torch_advise differs from gpu-basics advise (${rc})")
endif()
