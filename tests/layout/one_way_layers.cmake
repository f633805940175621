# docs/layout.md: the source tree is one-way. Inside core/ the folders are layered
#   common < sys < kernels < data < model < train < parallel
# and a file includes only its own folder and those below it; core/ includes neither io/
# nor app/, and io/ never includes app/. The build's libraries enforce part of it (lct_core
# cannot link lct_parallel's MPI); this test enforces the rest. Fails naming each include
# that points up.
#   cmake -DSRC=<source dir> -P tests/layout/one_way_layers.cmake
cmake_policy(SET CMP0057 NEW)
set(layers common sys kernels data model train parallel)
set(found "")
function(check_file f own_rank allowed_tops)
  file(STRINGS "${f}" lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"")
  foreach(line IN LISTS lines)
    string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*\"([^/\"]+)/.*" "\\1" top "${line}")
    if(top STREQUAL line)
      continue()  # a file of its own folder, without a folder
    endif()
    list(FIND layers "${top}" rank)
    if(rank GREATER -1 AND own_rank GREATER -1 AND rank GREATER own_rank)
      set(found "${found}\n  ${f}: ${line} (${top}/ is above this folder)" PARENT_SCOPE)
    elseif(rank EQUAL -1 AND NOT top IN_LIST allowed_tops)
      set(found "${found}\n  ${f}: ${line} (${top}/ may not be included here)" PARENT_SCOPE)
    endif()
  endforeach()
endfunction()
set(n 0)
foreach(layer IN LISTS layers)
  list(FIND layers "${layer}" own)
  file(GLOB_RECURSE files "${SRC}/core/${layer}/*.cpp" "${SRC}/core/${layer}/*.hpp")
  foreach(f IN LISTS files)
    check_file("${f}" ${own} "")
    math(EXPR n "${n} + 1")
  endforeach()
endforeach()
file(GLOB_RECURSE io_files "${SRC}/io/*.cpp" "${SRC}/io/*.hpp")
foreach(f IN LISTS io_files)
  check_file("${f}" 99 "io;nlohmann")
  math(EXPR n "${n} + 1")
endforeach()
if(found)
  message(FATAL_ERROR "includes that point up the layers (move the code down, or the include):${found}")
endif()
message(STATUS "${n} files of core/ and io/ include only their own layer and those below it")
