# gp-infer: run a model (safetensors + spec, or a built-in demo) on an .npy file through the
# pipeline and write the outputs as .npy.
add_executable(gp-infer ${CMAKE_CURRENT_LIST_DIR}/gp-infer.c)
target_link_libraries(gp-infer PRIVATE gpupipe::gpupipe Threads::Threads)
target_compile_definitions(gp-infer PRIVATE _GNU_SOURCE)
gp_warnings(gp-infer)
