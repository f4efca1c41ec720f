# cuda-bench (issue 3): copy peaks, transfer-, compute-bound and balanced pipelines, naive loop
# vs pipeline, in one run. CUDA builds only; without a device it prints why and exits 77.
if(GP_HAVE_CUDA)
  add_executable(cuda-bench ${CMAKE_CURRENT_LIST_DIR}/cuda-bench.c)
  # Static: it calls the library's spin kernel launcher (gp__spin_launch, kernels/spin.h).
  target_link_libraries(cuda-bench PRIVATE gpupipe_static Threads::Threads)
  target_include_directories(cuda-bench PRIVATE ${PROJECT_SOURCE_DIR}/kernels)
  target_compile_definitions(cuda-bench PRIVATE _GNU_SOURCE)
  gp_warnings(cuda-bench)
endif()
