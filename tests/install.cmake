# Install into a temporary prefix; build and run consumers with find_package and pkg-config.
find_program(GP_PKG_CONFIG pkg-config)
if(GP_PKG_CONFIG)
  add_test(NAME test_install
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/install/run.sh ${PROJECT_BINARY_DIR}
                   ${PROJECT_SOURCE_DIR})
  set_tests_properties(test_install PROPERTIES LABELS unit TIMEOUT 300)
else()
  message(WARNING "pkg-config not found: test_install is not registered")
endif()
