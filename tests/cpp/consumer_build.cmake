# cmake -DPREFIX=<install prefix> -DSOURCE=<project> -DBINARY=<dir> -DGENERATOR=<g>
#       [-DMAKE_PROGRAM=<ninja>] -P consumer_build.cmake
# Configures and builds a downstream project against the installed tdaot package, from a clean
# build dir, as a robot service's own build would (find_package(tdaot) via CMAKE_PREFIX_PATH).
file(REMOVE_RECURSE "${BINARY}")
set(make_program)
if(MAKE_PROGRAM)
  set(make_program "-DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM}")
endif()
execute_process(
  COMMAND "${CMAKE_COMMAND}" -S "${SOURCE}" -B "${BINARY}" -G "${GENERATOR}" ${make_program}
          "-DCMAKE_PREFIX_PATH=${PREFIX}" -DCMAKE_BUILD_TYPE=Release
  RESULT_VARIABLE code)
if(NOT code EQUAL 0)
  message(FATAL_ERROR "configuring ${SOURCE} against ${PREFIX} failed (${code})")
endif()
execute_process(COMMAND "${CMAKE_COMMAND}" --build "${BINARY}" RESULT_VARIABLE code)
if(NOT code EQUAL 0)
  message(FATAL_ERROR "building ${SOURCE} failed (${code})")
endif()
