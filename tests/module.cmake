# The CUDA module is optional at run time (tests/module/run.sh): a program linked to the shared
# library runs on the host backend with the module missing, unloadable, or without the CUDA
# libraries, and libgpupipe.so needs no CUDA library. Label unit; runs in every build.
add_executable(module_probe module/probe.c)
target_link_libraries(module_probe PRIVATE gpupipe)
gp_warnings(module_probe)
add_test(NAME module_optional
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/module/run.sh ${PROJECT_BINARY_DIR}
                 $<TARGET_FILE:module_probe> ${CMAKE_C_COMPILER} $<BOOL:${GP_HAVE_CUDA}>)
set_tests_properties(module_optional PROPERTIES LABELS unit TIMEOUT 120)
if(TARGET gpupipe-cuda)
  add_dependencies(module_probe gpupipe-cuda)
endif()
