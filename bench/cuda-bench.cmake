# cuda-bench (issue 3): copy peaks, transfer-, compute-bound and balanced pipelines, naive loop
# vs pipeline, in one run. CUDA builds only; without a device it prints why and exits 77.
# Not installed. Its spin kernel (bench/bench-spin.cu, with %globaltimer stamps) is its own.
if(GP_HAVE_CUDA)
  add_executable(cuda-bench ${CMAKE_CURRENT_LIST_DIR}/cuda-bench.c
                          ${CMAKE_CURRENT_LIST_DIR}/bench-spin.cu)
  target_link_libraries(cuda-bench PRIVATE gpupipe_static Threads::Threads)
  target_compile_definitions(cuda-bench PRIVATE _GNU_SOURCE)
  gp_warnings(cuda-bench)
endif()
