# gp-infer: run a model (safetensors + spec, or a built-in demo) on an .npy file through the
# pipeline and write the outputs as .npy.
add_executable(gp-infer ${CMAKE_CURRENT_LIST_DIR}/gp-infer.c ${CMAKE_CURRENT_LIST_DIR}/gp-bench-util.c)
target_link_libraries(gp-infer PRIVATE gpupipe::gpupipe Threads::Threads m)
target_compile_definitions(gp-infer PRIVATE _GNU_SOURCE)
gp_warnings(gp-infer)
# Installed tools find the installed library beside them: RUNPATH $ORIGIN/../lib.
set_target_properties(gp-infer PROPERTIES INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")
install(TARGETS gp-infer RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
