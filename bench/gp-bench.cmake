# gp-bench: batch-size sweeps with baselines and the doctor's verdict per point (issue 5).
add_executable(gp-bench
  ${CMAKE_CURRENT_LIST_DIR}/gp-bench.c
  ${CMAKE_CURRENT_LIST_DIR}/gp-bench-workload.c
  ${CMAKE_CURRENT_LIST_DIR}/gp-bench-output.c
  ${CMAKE_CURRENT_LIST_DIR}/gp-bench-util.c)
# Public headers only (windows, the doctor and the report are public API). Linked statically
# for now only because the synthetic workload on CUDA launches the spin kernel, which is built
# into the library (GB_HAVE_SPIN below).
target_link_libraries(gp-bench PRIVATE gpupipe_static Threads::Threads m)
target_compile_definitions(gp-bench PRIVATE _GNU_SOURCE)
# The model workloads once the model runtime contributes sources to the library.
file(STRINGS ${PROJECT_SOURCE_DIR}/lib/model/sources.cmake gb_model_sources
     REGEX "^[^#]*GP_SOURCES")
if(gb_model_sources)
  target_compile_definitions(gp-bench PRIVATE GB_HAVE_MODEL)
endif()
# The synthetic workload on CUDA runs the benchmarks' spin kernel (bench/bench-spin.cu).
if(GP_HAVE_CUDA)
  target_sources(gp-bench PRIVATE ${CMAKE_CURRENT_LIST_DIR}/bench-spin.cu)
  target_compile_definitions(gp-bench PRIVATE GB_HAVE_SPIN)
  target_include_directories(gp-bench SYSTEM PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
  target_link_libraries(gp-bench PRIVATE CUDA::cudart)
endif()
gp_warnings(gp-bench)
# Installed tools find the installed library beside them: RUNPATH $ORIGIN/../lib.
set_target_properties(gp-bench PROPERTIES INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")
install(TARGETS gp-bench RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
