# cmake -DFILES=<file|file|...> [-DFORBIDDEN=torch|c10|...] -P link_closure.cmake
# Fails when the dynamic link closure of any FILE (what `ldd` lists: every library the loader
# maps for it, transitively) holds a libtorch* or libc10* library (lib<FORBIDDEN>*), or has a library the loader cannot find:
# the lite runtime and what is linked only to it must run with no libtorch installed.
string(REPLACE "|" ";" FILES "${FILES}")
if(NOT FORBIDDEN)
  set(FORBIDDEN "torch|c10")
endif()
foreach(file IN LISTS FILES)
  execute_process(COMMAND ldd "${file}" RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message("ldd ${file}:\n${out}${err}")
  if(NOT code EQUAL 0)
    message(FATAL_ERROR "ldd ${file} failed (exit ${code})")
  endif()
  string(REPLACE "\n" ";" lines "${out}")
  foreach(line IN LISTS lines)
    # Library file names only: a load address "(0x...)" can hold "c10" by chance, and a build
    # folder can be named after torch (build/torch-2.14.1, make test-torch).
    if(line MATCHES "lib(${FORBIDDEN})[^/ \t]*\\.so")
      message(FATAL_ERROR "${file} links a library it must not (lib${FORBIDDEN}): ${line}")
    endif()
    if(line MATCHES "not found")
      message(FATAL_ERROR "${file} needs a library the loader cannot find: ${line}")
    endif()
  endforeach()
endforeach()
