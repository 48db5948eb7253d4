# cmake -DCOMMAND=<cmd|arg|...> -DEXPECT_CODE=<n> -DEXPECT_OUTPUT=<regex> -P expect_exit.cmake
# Runs COMMAND and fails unless it exits with EXPECT_CODE and stdout+stderr match EXPECT_OUTPUT.
string(REPLACE "|" ";" COMMAND "${COMMAND}")
execute_process(COMMAND ${COMMAND} RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT code STREQUAL EXPECT_CODE)
  message(FATAL_ERROR "exit code ${code}, expected ${EXPECT_CODE}")
endif()
if(NOT "${out}${err}" MATCHES "${EXPECT_OUTPUT}")
  message(FATAL_ERROR "output does not match '${EXPECT_OUTPUT}'")
endif()
