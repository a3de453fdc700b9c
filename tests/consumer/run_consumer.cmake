# Installs the build tree into a scratch prefix, then configures, builds and runs the
# consumer project against it with find_package(voxaug).
file(REMOVE_RECURSE ${VOXAUG_WORK_DIR})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${VOXAUG_BUILD_DIR} --prefix ${VOXAUG_WORK_DIR}/prefix
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --install failed (${rc})")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -S ${VOXAUG_CONSUMER_SRC} -B ${VOXAUG_WORK_DIR}/build
                        -G ${VOXAUG_GENERATOR} -DCMAKE_PREFIX_PATH=${VOXAUG_WORK_DIR}/prefix
                        -DTorch_DIR=${VOXAUG_TORCH_DIR}
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "configuring the consumer failed (${rc})")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${VOXAUG_WORK_DIR}/build RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "building the consumer failed (${rc})")
endif()
execute_process(COMMAND ${VOXAUG_WORK_DIR}/build/consumer RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the consumer failed (${rc})")
endif()
if(VOXAUG_TORCH_DIR)
  if(NOT EXISTS ${VOXAUG_WORK_DIR}/build/consumer_torch)
    message(FATAL_ERROR "voxaug::torch was not found by the consumer")
  endif()
  execute_process(COMMAND ${VOXAUG_WORK_DIR}/build/consumer_torch RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "the LibTorch consumer failed (${rc})")
  endif()
endif()
