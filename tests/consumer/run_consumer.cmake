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
