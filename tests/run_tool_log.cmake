# tests/run_tool_log.cmake - RF_LOG and RF_DUMP_GRAPH_DIR through the
# `ringflow` command: without RF_LOG `ringflow lower` prints nothing to stderr;
# RF_LOG=debug adds log lines there (placement, lowering, collective groups)
# and leaves stdout as it was; RF_LOG=warn prints nothing for a graph that
# lowers cleanly; a bad RF_LOG is a usage error; RF_DUMP_GRAPH_DIR writes the
# phases. Invoked by ctest:
#   cmake -DTOOL=<ringflow> -DGRAPH=<file.json> -DWORK=<dir> -P run_tool_log.cmake
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})

function(expect_contains text what)
  string(FIND "${text}" "${what}" pos)
  if(pos EQUAL -1)
    message(FATAL_ERROR "expected to find '${what}' in:\n${text}")
  endif()
endfunction()

set(CLEAN ${CMAKE_COMMAND} -E env --unset=RF_LOG --unset=RF_DUMP_GRAPH_DIR)

execute_process(COMMAND ${CLEAN} ${TOOL} lower --devices 3 ${GRAPH}
                OUTPUT_VARIABLE quiet_out ERROR_VARIABLE quiet_err
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR NOT quiet_err STREQUAL "")
  message(FATAL_ERROR "ringflow lower without RF_LOG (${rc}) wrote to "
                      "stderr:\n${quiet_err}")
endif()

execute_process(COMMAND ${CLEAN} RF_LOG=debug ${TOOL} lower --devices 3 ${GRAPH}
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "RF_LOG=debug ringflow lower failed (${rc}):\n${err}")
endif()
if(NOT out STREQUAL quiet_out)
  message(FATAL_ERROR "RF_LOG changed stdout:\n${out}")
endif()
expect_contains("${err}" "ringflow: info: session: devices cpu:0..cpu:2")
expect_contains("${err}" "ringflow: debug: place: compile 1: node 'total' (Reduce) on cpu:1: requested")
expect_contains("${err}" "ringflow: info: place: compile 1: 11 nodes:")
expect_contains("${err}" "ringflow: debug: lower: collective 'total' gets _ReduceSend 'total/_ReduceSend' on cpu:0")
expect_contains("${err}" "ringflow: debug: collective: 'grads' (AllReduce): 3 participants on cpu:0,cpu:1,cpu:2")
expect_contains("${err}" "ringflow: debug: compile 1: phase post_placement: 11 nodes before, 16 after")

execute_process(COMMAND ${CLEAN} RF_LOG=warn ${TOOL} lower --devices 3 ${GRAPH}
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR NOT err STREQUAL "")
  message(FATAL_ERROR "RF_LOG=warn (${rc}) printed:\n${err}")
endif()

execute_process(COMMAND ${CLEAN} RF_LOG=loud ${TOOL} lower --devices 3 ${GRAPH}
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 2)
  message(FATAL_ERROR "RF_LOG=loud exited ${rc}, not 2:\n${err}")
endif()
expect_contains("${err}" "RF_LOG=loud: want debug, info, warn or error")

execute_process(COMMAND ${CLEAN} RF_DUMP_GRAPH_DIR=${WORK}/dumps ${TOOL} lower
                        --devices 3 ${GRAPH}
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "RF_DUMP_GRAPH_DIR ringflow lower failed (${rc}):\n${err}")
endif()
foreach(f 01_pre_placement_before.json 03_post_placement_after.json
          03_post_placement_after.dot 04_host_memory_after.dot)
  if(NOT EXISTS ${WORK}/dumps/000001_${f})
    file(GLOB got ${WORK}/dumps/*)
    message(FATAL_ERROR "no ${WORK}/dumps/000001_${f}; got:\n${got}")
  endif()
endforeach()
file(READ ${WORK}/dumps/000001_03_post_placement_after.json json)
expect_contains("${json}" "\"op\": \"_BroadcastRecv\"")
message(STATUS "RF_LOG and RF_DUMP_GRAPH_DIR through ringflow: OK")
