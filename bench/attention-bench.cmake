# attention-bench: the variable-length attention kernel alone, per token (bench/attention-bench.py
# sets it beside torch's scaled_dot_product_attention). CUDA builds only; without a usable device
# it prints why and exits 77. Not installed.
if(GP_HAVE_CUDA)
  add_executable(attention-bench ${CMAKE_CURRENT_LIST_DIR}/attention-bench.c
                                 ${CMAKE_CURRENT_LIST_DIR}/bench-spin.cu)
  target_link_libraries(attention-bench PRIVATE gpupipe_static)
  target_include_directories(attention-bench PRIVATE ${PROJECT_SOURCE_DIR}/lib)
  target_compile_definitions(attention-bench PRIVATE _GNU_SOURCE)
  gp_warnings(attention-bench)
endif()
