# tests/run_tool_lower.cmake - runs `ringflow lower` on a saved graph and
# checks that it prints both graphs, writes both as DOT, and fails cleanly on
# missing and malformed files. Invoked by ctest:
#   cmake -DTOOL=<ringflow> -DGRAPH=<file.json> -DWORK=<dir> -P run_tool_lower.cmake
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})

function(expect_contains text what)
  string(FIND "${text}" "${what}" pos)
  if(pos EQUAL -1)
    message(FATAL_ERROR "expected to find '${what}' in:\n${text}")
  endif()
endfunction()

execute_process(COMMAND ${TOOL} lower --devices 3 ${GRAPH} --dot ${WORK}/dot
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "ringflow lower failed (${rc}):\n${out}\n${err}")
endif()
expect_contains("${out}" "== before lowering (11 nodes)")
expect_contains("${out}" "total = Reduce(x0:0, x1:0, x2:0)  @cpu:1")
expect_contains("${out}" "share = Broadcast(total:0)  @cpu:1")
expect_contains("${out}" "== after placement and lowering (16 nodes)")
expect_contains("${out}" "total/_ReduceRecv = _ReduceRecv(x1:0)  @cpu:1")
expect_contains("${out}" "total/_ReduceSend = _ReduceSend(x0:0)  @cpu:0")
expect_contains("${out}" "share/_BroadcastSend = _BroadcastSend(total/_ReduceRecv:0)")
expect_contains("${out}" "share/Shape = Shape(total/_ReduceRecv:0)  @cpu:1")
expect_contains("${out}" "use0 = Add(share/_BroadcastRecv:0, grads_0:0)  @cpu:0")
expect_contains("${out}" "use1 = Add(total/_ReduceRecv:0, grads_1:0) ^share/_BroadcastSend  @cpu:1")
foreach(stem before after)
  if(NOT EXISTS ${WORK}/dot/${stem}.dot)
    message(FATAL_ERROR "no ${WORK}/dot/${stem}.dot:\n${out}")
  endif()
  file(READ ${WORK}/dot/${stem}.dot dot)
  expect_contains("${dot}" "subgraph cluster_")
  expect_contains("${dot}" "label=\"cpu:2\"")
endforeach()
file(READ ${WORK}/dot/after.dot dot)
expect_contains("${dot}" "style=dashed")

# Errors: a missing file, a malformed one, a bad option.
execute_process(COMMAND ${TOOL} lower ${WORK}/missing.json
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(rc EQUAL 0)
  message(FATAL_ERROR "lower of a missing file succeeded")
endif()
expect_contains("${err}" "missing.json")
file(WRITE ${WORK}/bad.json "{\"format\": \"ringflow-graph\", \"version\": 1, \"nodes\": [{\"name\": \"a\", \"op\": \"Nope\"}]}")
execute_process(COMMAND ${TOOL} lower ${WORK}/bad.json
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(rc EQUAL 0)
  message(FATAL_ERROR "lower of a malformed file succeeded")
endif()
expect_contains("${err}" "unknown op 'Nope'")
# A --dot directory that cannot be made fails before anything is printed.
execute_process(COMMAND ${TOOL} lower ${GRAPH} --dot ${WORK}/no/such/dir
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 1 OR NOT out STREQUAL "")
  message(FATAL_ERROR "lower --dot into a missing parent: exit ${rc}:\n${out}\n${err}")
endif()
expect_contains("${err}" "cannot create the directory")
# A bad --devices: a usage error (exit 2), one line naming it.
foreach(bad 0 65 cpu:3-1 cpu:0,gpu:0)
  execute_process(COMMAND ${TOOL} lower --devices ${bad} ${GRAPH}
                  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL 2 OR NOT out STREQUAL "")
    message(FATAL_ERROR "lower --devices ${bad}: exit ${rc}:\n${out}\n${err}")
  endif()
  expect_contains("${err}" "ringflow: lower: --devices '${bad}': ")
  string(REGEX MATCHALL "\n" lines "${err}")
  list(LENGTH lines nlines)
  if(NOT nlines EQUAL 1)
    message(FATAL_ERROR "lower --devices ${bad}: not one line:\n${err}")
  endif()
endforeach()
# The same devices in the list syntax: the same lowering.
execute_process(COMMAND ${TOOL} lower --devices cpu:0-2 ${GRAPH}
                OUTPUT_VARIABLE listed RESULT_VARIABLE rc)
execute_process(COMMAND ${TOOL} lower --devices 3 ${GRAPH}
                OUTPUT_VARIABLE counted)
if(NOT rc EQUAL 0 OR NOT listed STREQUAL counted)
  message(FATAL_ERROR "lower --devices cpu:0-2 differs from --devices 3:\n${listed}")
endif()
message(STATUS "ringflow lower: OK")
