# Runs the gpu-basics binary the way a user would and checks exit code, messages and files.
# -DEXE=<binary> -DWORK=<scratch dir> -DMODE=no_gpu|host_only|bad_config|hostile
# [-DDATA=<tests/data>]
file(REMOVE_RECURSE ${WORK}/${MODE})
file(MAKE_DIRECTORY ${WORK}/${MODE})
set(dir ${WORK}/${MODE})

function(expect_run expected_rc stderr_regex)
  string(TIMESTAMP start "%s%f")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
                  WORKING_DIRECTORY ${dir} TIMEOUT 10)
  string(TIMESTAMP stop "%s%f")
  math(EXPR elapsed_ms "(${stop} - ${start}) / 1000")
  # Bad input is refused at once, never after a wait or a hang: a bound well above the ~0.4 s a
  # refusal takes, since a first run on a cold or busy 2-core machine has taken just over 1 s.
  if(elapsed_ms GREATER 3000)
    message(FATAL_ERROR "${ARGN}: took ${elapsed_ms} ms (at most 3000)")
  endif()
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
  foreach(cmd info all memory unified)
    expect_run(3 "^gpu-basics: no NVIDIA GPU visible: "
               ${CMAKE_COMMAND} -E env CUDA_VISIBLE_DEVICES= ${EXE} ${cmd} --json ${dir}/${cmd}.json)
    if(EXISTS ${dir}/${cmd}.json)
      message(FATAL_ERROR "${cmd}: wrote ${dir}/${cmd}.json although it failed")
    endif()
  endforeach()
  # The ledger's child process, run by hand: no GPU (or no NVML), one line, exit 3; no JSON.
  expect_run(3 "^gpu-basics: ledger-probe: "
             ${CMAKE_COMMAND} -E env CUDA_VISIBLE_DEVICES= ${EXE} ledger-probe 0 0000:00:00.0)
  expect_run(2 "^gpu-basics: usage: gpu-basics ledger-probe" ${EXE} ledger-probe)
elseif(MODE STREQUAL "host_only")
  # A host-only build cannot measure: one line that says so, exit 3, nothing written.
  foreach(cmd info all memory check unified)
    expect_run(3 "^gpu-basics: ${cmd} measures on a GPU, and this gpu-basics was built host-only"
               ${EXE} ${cmd} --json ${dir}/${cmd}.json)
    if(EXISTS ${dir}/${cmd}.json)
      message(FATAL_ERROR "${cmd}: wrote ${dir}/${cmd}.json although it failed")
    endif()
  endforeach()
  expect_run(3 "^gpu-basics: ledger-probe measures on a GPU, and this gpu-basics was built host-only"
             ${EXE} ledger-probe 0 0000:00:00.0)
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
elseif(MODE STREQUAL "hostile")
  # Bad input as a new user or a hostile file gives it: one line, exit code 2 (7 for an output
  # that cannot be written), within a second, and nothing written. No GPU is needed: every case
  # is refused before one is looked for.
  set(in ${WORK}/${MODE}_inputs)
  file(REMOVE_RECURSE ${in})
  file(MAKE_DIRECTORY ${in}/a_directory)
  execute_process(COMMAND mkfifo ${in}/fifo)
  set(gpu ${CMAKE_COMMAND} -E env CUDA_VISIBLE_DEVICES= ${EXE})
  function(yaml name text)
    file(WRITE ${in}/${name}.yaml "${text}")
  endfunction()
  string(REPEAT "k" 10485760 key10m)
  yaml(key10m "${key10m}: 1\n")
  string(REPEAT "k" 60000 key60k)
  yaml(key60k "${key60k}: 1\n")
  string(REPEAT "k" 1100 key1100)
  yaml(key1100 "${key1100}: 1\n")
  string(REPEAT "k" 100 key100)
  yaml(key100 "transfer:\n  ${key100}: 1\n")
  string(REPEAT "[1]," 15000 shapes)
  yaml(shapes "transfer:\n  tensor_shapes: [${shapes}[1]]\n")
  string(REPEAT "x" 60000 dtype)
  yaml(dtype "transfer:\n  dtype: ${dtype}\n")
  yaml(escapes "transfer:\n  dtype: \"\\e[31mred\\0\"\n")
  yaml(two_documents "device: 0\n---\ndevice: 1\n")
  yaml(empty_documents "---\n---\ntransfer:\n  num_streams: 0\n")
  yaml(dotted "transfer.num_streams: 8\ntransfer:\n  num_streams: 2\n")
  yaml(plus_minus "device: +-0\n")
  string(REPEAT "[" 600 open)
  string(REPEAT "]" 600 close)
  yaml(deep "device: ${open}${close}\n")
  yaml(alias "transfer:\n  dtype: &a float32\n  num_streams: *a\n")
  file(WRITE ${in}/a_file "x")

  set(not_regular "is not a regular file \\(a device, FIFO or socket\\); give a YAML file")
  expect_run(2 "^gpu-basics: /dev/zero: ${not_regular}\n$" ${gpu} info --config /dev/zero)
  expect_run(2 "^gpu-basics: /dev/urandom: ${not_regular}\n$" ${gpu} info --config /dev/urandom)
  expect_run(2 "^gpu-basics: [^\n]*/fifo: ${not_regular}\n$" ${gpu} info --config ${in}/fifo)
  expect_run(2 "/a_directory: is a directory, not a configuration file\n$"
             ${gpu} info --config ${in}/a_directory)
  expect_run(2 "^gpu-basics: /proc/self/mem: error while reading the configuration file"
             ${gpu} info --config /proc/self/mem)
  expect_run(2 "key10m.yaml: the configuration file is 10485764 bytes; at most 64 KiB"
             ${gpu} info --config ${in}/key10m.yaml)
  expect_run(2 "key60k.yaml:1:60001: invalid YAML: a ':' where no value can start: a key longer than 1024"
             ${gpu} info --config ${in}/key60k.yaml)
  expect_run(2 "key1100.yaml:1:1101: invalid YAML: a ':' where no value can start"
             ${gpu} info --config ${in}/key1100.yaml)
  expect_run(2 "key100.yaml:2:3: transfer: a key of 100 characters, \"k+\"\\.\\.\\. \\(100 characters\\); a key name is at most 64\n$"
             ${gpu} info --config ${in}/key100.yaml)
  expect_run(2 "shapes.yaml:2:18: transfer.tensor_shapes: a list of 15001 shapes; at most 64 are allowed\n$"
             ${gpu} info --config ${in}/shapes.yaml)
  expect_run(2 "dtype.yaml:2:10: transfer.dtype: a value of 60000 characters, \"x+\"\\.\\.\\. \\(60000 characters\\); a value is at most 4096\n$"
             ${gpu} info --config ${in}/dtype.yaml)
  expect_run(2 "transfer.dtype: expected one of [^\n]*, got \"\\\\x1b\\[31mred\\\\x00\"\n$"
             ${gpu} info --config ${in}/escapes.yaml)
  expect_run(2 "two_documents.yaml:2:1: a second YAML document"
             ${gpu} info --config ${in}/two_documents.yaml)
  expect_run(2 "empty_documents.yaml:2:1: a second YAML document"
             ${gpu} info --config ${in}/empty_documents.yaml)
  expect_run(2 "dotted.yaml:1:1: transfer.num_streams: a dotted key; in a file, nest it"
             ${gpu} info --config ${in}/dotted.yaml)
  expect_run(2 "plus_minus.yaml:1:9: device: expected a device index \\(an integer >= 0\\), got \"\\+-0\"\n$"
             ${gpu} info --config ${in}/plus_minus.yaml)
  expect_run(2 "deep.yaml:1:[0-9]+: invalid YAML: nested more than 500 levels deep\n$"
             ${gpu} info --config ${in}/deep.yaml)
  expect_run(2 "alias.yaml:3:3: transfer.num_streams: expected an integer in 1..64, got \"float32\" \\(through an alias of line 2\\)\n$"
             ${gpu} info --config ${in}/alias.yaml)
  # An empty argument does not survive a CMake list: bash passes it.
  foreach(option --config --log-level --json --csv --set)
    expect_run(2 "^gpu-basics: ${option}: needs a value, got an empty one"
               bash -c "\"$0\" info ${option} ''" ${EXE})
    expect_run(2 "^gpu-basics: ${option}: needs a value \\(" ${gpu} info ${option}=)
  endforeach()
  expect_run(2 "^gpu-basics: --trace: needs a value, got an empty one"
             bash -c "\"$0\" profile --trace ''" ${EXE})
  expect_run(2 "^gpu-basics: unknown command \"\"; expected one of" bash -c "\"$0\" ''" ${EXE})
  expect_run(2 "^gpu-basics: --trace \"\\.gz\": '\\.gz' alone is not a file name"
             ${gpu} profile --trace .gz)
  expect_run(2 "^gpu-basics: unknown command \"bogus\"; expected one of info, memory" ${gpu} bogus)
  expect_run(2 "^gpu-basics: unknown command \"INFO\"; did you mean 'info'\\?\n$" ${gpu} INFO)
  expect_run(2 "^gpu-basics: \"--config\": options come after the command"
             ${gpu} --config x.yaml info)
  expect_run(2 "^gpu-basics: unexpected arguments: \"x.yaml\" \"y.yaml\"" ${gpu} info x.yaml y.yaml)
  expect_run(2 "^gpu-basics: --set: a key with a space in it: \"transfer.num streams\""
             ${gpu} info --set "transfer.num streams=8")
  expect_run(2 "^gpu-basics: --set: a key of 60000 characters, " ${gpu} info --set "${dtype}=1")
  # Spaces around '=' are fine: the run goes on to look for a GPU.
  expect_run(3 "^gpu-basics: (no NVIDIA GPU visible|info measures on a GPU, and this gpu-basics was built host-only)" ${gpu} info --set "transfer.num_streams = 8")
  # Outputs are checked before the GPU is looked for: exit 7, not 3.
  expect_run(7 "^gpu-basics: cannot write [^\n]*a_file/run.json: Not a directory\n$"
             ${gpu} all --json ${in}/a_file/run.json)
  expect_run(7 "^gpu-basics: cannot write [^\n]*a_directory: it is a directory\n$"
             ${gpu} info --csv ${in}/a_directory)
  expect_run(7 "^gpu-basics: cannot write into the directory [^\n]*a_file: [^\n]*a_file is not a directory\n$"
             ${gpu} transfer --set output.directory=${in}/a_file)
  # A results file that is not a regular file, or is too large, is refused at once, one line,
  # exit 2, by every command that reads one (a FIFO with no writer would wait forever).
  foreach(args "show;@" "report;@;-o;${dir}/r.html" "compare;@;@" "check;--from;@")
    foreach(input /dev/zero ${in}/fifo ${in}/a_directory)
      string(REPLACE "@" "${input}" run_args "${args}")
      expect_run(2 "^gpu-basics: [^\n]*: is not a regular file \\((a character device|a FIFO|a directory)\\); give a results file"
                 ${EXE} ${run_args})
    endforeach()
  endforeach()
  string(REPEAT "          " 110000 pad)
  file(WRITE ${in}/big.json "{}${pad}")
  expect_run(2 "big.json: larger than 1 MiB, the limit for a results file [^\n]*GPU_BASICS_MAX_INPUT_MIB"
             ${CMAKE_COMMAND} -E env GPU_BASICS_MAX_INPUT_MIB=1 ${EXE} show ${in}/big.json)
  expect_run(2 "GPU_BASICS_MAX_INPUT_MIB: expected a whole number of MiB above 0, got \"-3\""
             ${CMAKE_COMMAND} -E env GPU_BASICS_MAX_INPUT_MIB=-3 ${EXE} show ${DATA}/h200_all.json)
  # A results file that is valid JSON but hostile: one line naming the file and the key, exit 2,
  # within a second, for show, show --json, report and compare alike.
  string(REPEAT "[" 100000 jopen)
  string(REPEAT "]" 100000 jclose)
  file(WRITE ${in}/deep.json "{\"schema_version\": 2, \"command\": \"info\", \"errors\": {\"info\": ${jopen}${jclose}}}")
  foreach(args "show;@" "show;@;--json;-" "report;@;-o;${dir}/r.html" "compare;@;@" "check;--from;@")
    string(REPLACE "@" "${in}/deep.json" run_args "${args}")
    expect_run(2 "^gpu-basics: [^\n]*deep.json: errors.info(\\[0\\])+: nested more than 64 levels deep\n$"
               ${EXE} ${run_args})
  endforeach()
  file(WRITE ${in}/huge.json "{\"schema_version\": 2, \"command\": \"info\", \"environment\": {\"x\": [1, 1e400]}}")
  expect_run(2 "huge.json: environment.x\\[1\\]: a number outside the range of a double\n$"
             ${EXE} show ${in}/huge.json)
  string(REPEAT "x" 100000 long)
  file(WRITE ${in}/long.json "{\"schema_version\": 2, \"command\": \"info\", \"errors\": {\"info\": \"${long}\"}}")
  expect_run(2 "long.json: errors.info: a string of 100000 bytes; at most 64 KiB\n$"
             ${EXE} report ${in}/long.json -o ${dir}/r.html)
  file(WRITE ${in}/version.json "{\"schema_version\": 4294967298, \"command\": \"info\"}")
  expect_run(2 "version.json: schema_version 4294967298 is not one this build reads"
             ${EXE} show ${in}/version.json)
  file(READ ${DATA}/h200_all.json fixture)
  string(REPLACE "\"device\": 0," "\"device\": 4294967296," device "${fixture}")
  file(WRITE ${in}/device.json "${device}")
  expect_run(2 "device.json: environment.config.device: expected a device index"
             ${EXE} show ${in}/device.json)
  file(WRITE ${in}/escape.json "{\"schema_version\": 2, \"command\": \"\\u001b]0;title\\u0007\"}")
  expect_run(2 "escape.json: unknown lesson '\\\\x1b\\]0;title\\\\x07'\n$" ${EXE} show ${in}/escape.json)
  expect_run(2 "--threshold" ${EXE} compare ${DATA}/h200_all.json ${DATA}/h200_all_b.json --threshold nan)
  # An output that is an input, or two outputs that are one file, are refused before anything
  # is read or written.
  file(COPY ${DATA}/h200_all.json DESTINATION ${in})
  expect_run(2 "-o \"[^\n]*h200_all.json\" is the input [^\n]*; refusing to overwrite an input\n$"
             ${EXE} report ${in}/h200_all.json -o ${in}/h200_all.json)
  file(SHA256 ${in}/h200_all.json after)
  file(SHA256 ${DATA}/h200_all.json before)
  if(NOT after STREQUAL before)
    message(FATAL_ERROR "report -o IN.json changed its input")
  endif()
  expect_run(2 "--json and --csv name the same file" ${EXE} show ${DATA}/h200_all.json
             --json ${dir}/same.out --csv ${dir}/./same.out)
  # replay: a file that is not a PyTorch memory snapshot, or a bad --policy, is one line, exit 2.
  expect_run(2 "^gpu-basics: /dev/zero: is not a regular file" ${EXE} replay /dev/zero)
  expect_run(2 "^gpu-basics: [^\n]*a_directory: is not a regular file" ${EXE} replay ${in}/a_directory)
  expect_run(2 "^gpu-basics: [^\n]*a_file: not a pickle" ${EXE} replay ${in}/a_file)
  expect_run(2 "^gpu-basics: [^\n]*h200_all.json: not a pickle" ${EXE} replay ${DATA}/h200_all.json
             --json ${dir}/replay.json)
  expect_run(2 "^gpu-basics: [^\n]*missing.pickle: cannot be read" ${EXE} replay ${in}/missing.pickle)
  expect_run(2 "^gpu-basics: --policy: allocator conf: max_split_size_mb: "
             ${EXE} replay ${DATA}/snapshot_small.pickle --policy max_split_size_mb:x)
  expect_run(2 "^gpu-basics: --policy: a blank policy \"  \"; give a PYTORCH_CUDA_ALLOC_CONF string"
             ${EXE} replay ${DATA}/snapshot_small.pickle --policy "  ")
  expect_run(2 "^gpu-basics: --policy: \"expandable_segments:True\" is the same policy as"
             ${EXE} replay ${DATA}/snapshot_small.pickle --policy expandable_segments:True)
  # advise: the same reader; a size that is not one, a bad policy, each one line, exit 2.
  expect_run(2 "^gpu-basics: /dev/zero: is not a regular file" ${EXE} advise /dev/zero)
  expect_run(2 "^gpu-basics: [^\n]*h200_all.json: not a pickle" ${EXE} advise ${DATA}/h200_all.json)
  expect_run(2 "--fit: expected a size such as 24GiB, 40GB or 1073741824, got \"lots\" \\(see"
             ${EXE} advise ${DATA}/snapshot_small.pickle --fit lots)
  expect_run(2 "^gpu-basics: --policy: allocator conf: " ${EXE} advise
             ${DATA}/snapshot_small.pickle --policy bogus_key:1)
  expect_run(2 "--json and --html name the same file" ${EXE} advise
             ${DATA}/snapshot_small.pickle --json ${dir}/advice.out --html ${dir}/./advice.out)
  # A --policy's control characters are shown escaped.
  string(ASCII 27 esc)
  string(ASCII 7 bel)
  expect_run(2 "^gpu-basics: --policy: allocator conf: '\\\\x1b\\]0;t\\\\x07': expected key:value\n$"
             ${EXE} replay ${DATA}/snapshot_small.pickle --policy "${esc}]0;t${bel}")
  expect_run(2 "^gpu-basics: --policy: allocator conf: '\\\\x1b\\]0;t\\\\x07': expected key:value\n$"
             ${EXE} advise ${DATA}/snapshot_small.pickle --policy "${esc}]0;t${bel}")
  # A 2 GiB sparse file that starts as a pickle and goes wrong at its third byte: refused from
  # its first bytes, at once, without reading the rest.
  execute_process(COMMAND bash -c "printf '\\x80\\x02' > \"$0\" && truncate -s 2G \"$0\""
                          ${in}/sparse.pickle)
  expect_run(2 "^gpu-basics: [^\n]*sparse.pickle: pickle: opcode 0x00 \\(only plain data is read: no classes, no calls\\) at offset 2\n$"
             ${EXE} replay ${in}/sparse.pickle)
  # Special files are written in place, never replaced.
  expect_run(0 "" ${EXE} show ${DATA}/h200_all.json --json /dev/null)
  expect_run(0 "" ${EXE} show ${DATA}/h200_all.json --csv /dev/null)
  execute_process(COMMAND stat -c %F /dev/null OUTPUT_VARIABLE kind)
  if(NOT kind MATCHES "character special file")
    message(FATAL_ERROR "/dev/null was replaced: it is now a ${kind}")
  endif()
  # Standard output on a full disk: tables and --json - that are lost are exit 7, one line.
  execute_process(COMMAND ${EXE} replay ${DATA}/snapshot_small.pickle --json ${in}/replay.json
                  OUTPUT_QUIET RESULT_VARIABLE rc)
  foreach(args "show;${DATA}/h200_all.json" "show;${in}/replay.json" "show;${in}/replay.json;--json;-"
               "replay;${DATA}/snapshot_small.pickle" "advise;${DATA}/snapshot_small.pickle;--json;-")
    execute_process(COMMAND ${EXE} ${args} OUTPUT_FILE /dev/full ERROR_VARIABLE err
                    RESULT_VARIABLE rc TIMEOUT 10)
    if(NOT rc STREQUAL "7" OR NOT err MATCHES "^gpu-basics: cannot write to the standard output[^\n]*\n$")
      message(FATAL_ERROR "${args} > /dev/full: exit ${rc}, expected 7 and one line\n${err}")
    endif()
  endforeach()
  file(REMOVE ${in}/sparse.pickle ${in}/replay.json)
  file(GLOB left ${dir}/* ${dir}/.*)
  if(left)
    message(FATAL_ERROR "bad input left files behind: ${left}")
  endif()
endif()
