# docs/layout.md: core/parallel/ holds the MPI code; app/ calls it and never MPI itself (a raw
# call in app/ came back twice after being moved out). Fails naming each MPI_* call found.
#   cmake -DSRC=<source dir> -P tests/layout/no_mpi_calls_in_app.cmake
file(GLOB_RECURSE files "${SRC}/app/*.cpp" "${SRC}/app/*.hpp")
set(found "")
foreach(f IN LISTS files)
  file(STRINGS "${f}" lines)
  set(n 0)
  foreach(line IN LISTS lines)
    math(EXPR n "${n} + 1")
    string(REGEX REPLACE "//.*" "" code "${line}")  # comments may name MPI calls
    if(code MATCHES "MPI_[A-Z][A-Za-z_]*[ \t]*\\(")
      string(APPEND found "\n  ${f}:${n}: ${line}")
    endif()
  endforeach()
endforeach()
if(found)
  message(FATAL_ERROR "MPI calls in app/ (move them into core/parallel/):${found}")
endif()
message(STATUS "no MPI calls in app/ (${SRC}/app)")
