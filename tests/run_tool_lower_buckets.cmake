# tests/run_tool_lower_buckets.cmake - `ringflow lower --bucket-bytes N` shows
# the rewrite: two independent all-reduces fused into one bucket per device
# (and the one that reads the first's result left alone), one line per
# bucket saying which copies it costs; --bucket-bytes 0 fuses nothing;
# --comm-dtype bf16 adds the casts; bad values are usage errors. Invoked by
# ctest:
#   cmake -DTOOL=<ringflow> -DGRAPH=<buckets.json> -P run_tool_lower_buckets.cmake
function(expect_contains text what)
  string(FIND "${text}" "${what}" pos)
  if(pos EQUAL -1)
    message(FATAL_ERROR "expected to find '${what}' in:\n${text}")
  endif()
endfunction()
function(expect_lacks text what)
  string(FIND "${text}" "${what}" pos)
  if(NOT pos EQUAL -1)
    message(FATAL_ERROR "did not expect '${what}' in:\n${text}")
  endif()
endfunction()

execute_process(COMMAND ${TOOL} lower ${GRAPH} --devices 2 --bucket-bytes 1M
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "ringflow lower failed (${rc}):\n${out}\n${err}")
endif()
expect_contains("${out}" "g1_0/_BucketPack = _BucketPack(a0:0, b0:0)  @cpu:0")
expect_contains("${out}" "g1_1/AllReduce = AllReduce(g1_1/_BucketPack:0)  @cpu:1")
expect_contains("${out}" "s0 = Add(g1_0/_BucketUnpack:0, c0:0)  @cpu:0")
expect_contains("${out}" "g3_0 = AllReduce(s0:0)  @cpu:0")
# Producers write into the bucket (runtime/executor_homes.c): no "one copy
# in"; a copy only for inputs a kernel forwards (here: fed placeholders).
expect_contains("${out}" "bucket cpu:0: 2 all-reduces, 128 bytes of float32: producers write into the bucket, _BucketPack copies in only inputs a kernel forwards (here 2 of 2: a0, b0), zero-copy views out (_BucketUnpack)")
expect_lacks("${out}" "one copy in")
expect_contains("${out}" "bucket cpu:1: 2 all-reduces")
# The size the pass filled to: the user's for every kind ...
expect_contains("${out}" "zero-copy views out (_BucketUnpack); buckets of up to 1048576 bytes (--bucket-bytes)")

# ... or, without --bucket-bytes, the default of the devices' kind
# (RF_BUCKET_BYTES_AUTO: 1 MiB on CPU devices, 25 MiB on GPU devices).
execute_process(COMMAND ${TOOL} lower ${GRAPH} --devices 2
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "ringflow lower (default size) failed (${rc}):\n${err}")
endif()
expect_contains("${out}" "bucket cpu:0: 2 all-reduces, 128 bytes of float32")
expect_contains("${out}" "zero-copy views out (_BucketUnpack); buckets of up to 1048576 bytes (the default on CPU devices)")

execute_process(COMMAND ${TOOL} lower ${GRAPH} --devices 2 --bucket-bytes 0
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "ringflow lower --bucket-bytes 0 failed (${rc}):\n${err}")
endif()
expect_contains("${out}" "g2_1 = AllReduce(b1:0)  @cpu:1")
expect_lacks("${out}" "_BucketPack")

# 64 bytes hold one slice: nothing fuses, but bf16 casts every all-reduce.
execute_process(COMMAND ${TOOL} lower ${GRAPH} --devices 2 --bucket-bytes 64
                --comm-dtype bf16
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "ringflow lower --comm-dtype bf16 failed (${rc}):\n${err}")
endif()
expect_lacks("${out}" "_BucketPack")
expect_contains("${out}" "g2_0/Cast = Cast(b0:0)  @cpu:0")
expect_contains("${out}" "g2_0/AllReduce = AllReduce(g2_0/Cast:0)  @cpu:0")

foreach(bad "--bucket-bytes;-1" "--bucket-bytes;lots" "--comm-dtype;fp8")
  execute_process(COMMAND ${TOOL} lower ${GRAPH} ${bad}
                  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL 2)
    message(FATAL_ERROR "lower ${bad}: exit ${rc}, not 2:\n${err}")
  endif()
  list(GET bad 0 opt)
  expect_contains("${err}" "${opt}")
endforeach()
