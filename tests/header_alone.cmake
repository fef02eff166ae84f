# tests/header_alone.cmake - compiles a translation unit that includes one
# public header and nothing else, as C11, as C++11 and C++20, and as C++11
# inside extern "C" { } (as programs include C headers), warnings as errors:
# each header must be self-contained and compile for C++ users.
#   cmake -DCC=... -DCXX=... -DINCLUDE=<dir> -DHEADER=ringflow/x.h -DWORK=<dir>
#         -P header_alone.cmake
file(MAKE_DIRECTORY ${WORK})
string(MAKE_C_IDENTIFIER "${HEADER}" stem)
# The typedef keeps a header of macros only from leaving an empty C file.
set(tu "#include <${HEADER}>\ntypedef int header_alone_tu;\n")
file(WRITE ${WORK}/${stem}.c "${tu}")
file(WRITE ${WORK}/${stem}.cc "${tu}")
file(WRITE ${WORK}/${stem}_extern_c.cc "extern \"C\" {\n${tu}}\n")
set(flags -Wall -Wextra -Wpedantic -Werror -fsyntax-only -I${INCLUDE})
foreach(run "${CC};-std=c11;${stem}.c" "${CXX};-std=c++11;${stem}.cc"
            "${CXX};-std=c++20;${stem}.cc"
            "${CXX};-std=c++11;${stem}_extern_c.cc")
  list(GET run 0 compiler)
  list(GET run 1 std)
  list(GET run 2 file)
  execute_process(COMMAND ${compiler} ${std} ${flags} ${WORK}/${file}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${HEADER} does not compile in ${file} with ${std}:\n${out}")
  endif()
endforeach()
message(STATUS "${HEADER} compiles alone as C11, C++11, C++20 and in extern \"C\"")
