# make demo's configure on a machine without Boost: it succeeds, the demo is a target, and the
# three examples that need precis::analysis are left out (their message says so).
# Arguments: -DSRC= -DBIN= -DGEN= -DCXX=
execute_process(COMMAND ${CMAKE_COMMAND} -S ${SRC} -B ${BIN} -G ${GEN} -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_BUILD_TYPE=Release
                        -DPRECIS_BUILD_TESTS=OFF -DPRECIS_BUILD_BENCHMARKS=OFF -DPRECIS_CUDA=OFF -DPRECIS_DEMO_CUDA=OFF
                        -DCMAKE_DISABLE_FIND_PACKAGE_Boost=ON
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "configure without Boost failed (${rc}):\n${out}\n${err}")
endif()
if(NOT out MATCHES "examples error_benchmark, autodiff_tour and custom_op not built")
  message(FATAL_ERROR "configure without Boost did not say which examples it left out:\n${out}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${BIN} --target help RESULT_VARIABLE rc OUTPUT_VARIABLE targets)
if(NOT rc EQUAL 0 OR NOT targets MATCHES "train_fashion_mnist" OR targets MATCHES "error_benchmark")
  message(FATAL_ERROR "without Boost the targets should include train_fashion_mnist and not error_benchmark:\n${targets}")
endif()
message(STATUS "the demo configures without Boost")
