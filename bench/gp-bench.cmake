# gp-bench: batch-size sweeps with baselines and the doctor's verdict per point (issue 5).
add_executable(gp-bench
  ${CMAKE_CURRENT_LIST_DIR}/gp-bench.c
  ${CMAKE_CURRENT_LIST_DIR}/gp-bench-workload.c
  ${CMAKE_CURRENT_LIST_DIR}/gp-bench-output.c
  ${CMAKE_CURRENT_LIST_DIR}/gp-bench-util.c)
# Public headers only, against the shared library (like gp-infer): libgpupipe.so needs no CUDA
# library (the CUDA backend is a module it dlopens), so the installed gp-bench runs on a
# machine without CUDA and says "no device" there.
target_link_libraries(gp-bench PRIVATE gpupipe::gpupipe Threads::Threads m)
target_compile_definitions(gp-bench PRIVATE _GNU_SOURCE)
# The model workloads once the model runtime contributes sources to the library.
file(STRINGS ${PROJECT_SOURCE_DIR}/lib/model/sources.cmake gb_model_sources
     REGEX "^[^#]*GP_SOURCES")
if(gb_model_sources)
  target_compile_definitions(gp-bench PRIVATE GB_HAVE_MODEL)
endif()
# The synthetic workload on CUDA runs the benchmarks' spin kernel (bench/bench-spin.cu) with
# the static CUDA runtime: no NEEDED entry for libcudart (cudart_static loads libcuda.so.1 with
# dlopen at the first CUDA call; without a driver that call fails: "no device"). The kernel is
# launched on the slot's stream, which the module's shared runtime made: both runtimes work in
# the device's primary context, where a stream is the driver's CUstream and either runtime may
# launch on it (as a library that links cudart_static, NCCL for one, does on its caller's
# streams). gp-bench never resets the device, which would pull the context from under the
# other runtime.
if(GP_HAVE_CUDA)
  target_sources(gp-bench PRIVATE ${CMAKE_CURRENT_LIST_DIR}/bench-spin.cu)
  target_compile_definitions(gp-bench PRIVATE GB_HAVE_SPIN)
  target_include_directories(gp-bench SYSTEM PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
  set_target_properties(gp-bench PROPERTIES CUDA_RUNTIME_LIBRARY Static)
  target_link_libraries(gp-bench PRIVATE CUDA::cudart_static)
endif()
gp_warnings(gp-bench)
# Installed tools find the installed library beside them: RUNPATH $ORIGIN/../lib.
set_target_properties(gp-bench PROPERTIES INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")
install(TARGETS gp-bench RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
