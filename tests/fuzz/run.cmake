# Runs every fuzz target for FUZZ_SECONDS each (in the fuzz project's build directory), starting
# from a copy of its seed corpus (the corpus grows in the build directory, never in the source
# tree). A crash, sanitizer report, leak, timeout or out-of-memory fails the run; each target's
# last status line (execs, coverage) is printed.
#   cmake -DFUZZ_SECONDS=10 -DCORPUS_DIR=<source>/tests/fuzz/corpus [-DTARGETS=idx;shape] -P run.cmake
if(NOT FUZZ_SECONDS)
  set(FUZZ_SECONDS 10)
endif()
if(NOT TARGETS)
  set(TARGETS idx checkpoint policy shape ops)
endif()
set(_failed "")
foreach(t IN LISTS TARGETS)
  set(_work ${CMAKE_CURRENT_BINARY_DIR}/corpus-${t})
  file(MAKE_DIRECTORY ${_work})
  file(GLOB _seeds ${CORPUS_DIR}/${t}/*)
  file(COPY ${_seeds} DESTINATION ${_work})
  execute_process(COMMAND ./fuzz_${t} -max_total_time=${FUZZ_SECONDS} -rss_limit_mb=2048 -timeout=20 -print_final_stats=1
                          ${_work}
                  RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
  # libFuzzer's final status line (not list operations: its dictionary entries hold brackets and
  # semicolons)
  string(REGEX MATCH "#[0-9]+[ \t]+DONE[^\n]*" _line "${_err}")
  if(NOT _line)
    set(_line "(no final status line)")
  endif()
  string(REGEX MATCH "stat::number_of_executed_units: *[0-9]+" _execs "${_err}")
  message("fuzz_${t}: exit ${_rc}; ${_line}; ${_execs}")
  if(NOT _rc EQUAL 0)
    message("${_err}")
    list(APPEND _failed fuzz_${t})
  endif()
endforeach()
if(_failed)
  message(FATAL_ERROR "fuzz targets failed: ${_failed}")
endif()
