# The CUDA backend on the simulated device (label sim): the CUDA pipeline and GPU tests run
# with gpsim (sim/cudart_sim.c) preloaded in place of the CUDA Runtime, so CI without a GPU
# runs the backend's streams, events, copies, graph capture and fault paths
# (docs/DESIGN.md §11). Not a GPU: model layers (cuBLASLt, cuDNN) are not simulated, and the
# kernels are host emulations. Not built in sanitizer presets (CUDA is off there). A sim case
# never skips: no SKIP_RETURN_CODE, and GPT_REQUIRE_DEVICE=1. gpu_overlap is not among them:
# it measures copy engines and kernels running beside each other, which the simulated device's
# host threads on a CI machine's few cores do not. The tsan-sim preset runs these cases under
# ThreadSanitizer (all but sim_cuda_bench, whose timer reads mapped memory an emulated kernel
# writes: a race by construction).
if(NOT GP_HAVE_CUDA)
  return()
endif()

add_library(gpsim SHARED sim/cudart_sim.c)
target_include_directories(gpsim SYSTEM PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
target_link_libraries(gpsim PRIVATE Threads::Threads ${CMAKE_DL_LIBS})
if(GP_HAVE_CUDNN)
  target_compile_definitions(gpsim PRIVATE GPSIM_HAVE_CUDNN)
  target_include_directories(gpsim SYSTEM PRIVATE ${GP_CUDNN_INCLUDE_DIR})
endif()
gp_warnings(gpsim)

# gp_sim_case(name exe [ARGS ...] [ENV ...] [TIMEOUT s])
function(gp_sim_case name exe)
  cmake_parse_arguments(S "" "TIMEOUT" "ARGS;ENV" ${ARGN})
  if(NOT S_TIMEOUT)
    set(S_TIMEOUT 180)
  endif()
  add_test(NAME sim_${name} COMMAND ${exe} ${S_ARGS})
  set_tests_properties(sim_${name} PROPERTIES
    LABELS sim TIMEOUT ${S_TIMEOUT}
    ENVIRONMENT "LD_PRELOAD=$<TARGET_FILE:gpsim>;GPT_REQUIRE_DEVICE=1;GPSIM_DEVICES=1;${S_ENV}")
endfunction()

foreach(t test_e2e test_policy test_lifecycle test_slot test_varsize test_stress test_tiny_ring)
  gp_sim_case(${t} ${t} ARGS cuda)
endforeach()
gp_sim_case(gpu_fault_sticky gpu_fault_sticky ARGS sticky)
gp_sim_case(gpu_compute_error gpu_fault_sticky ARGS compute)
gp_sim_case(gpu_launch_error gpu_fault_sticky ARGS launch)
gp_sim_case(gpu_no_alloc gpu_no_alloc)
gp_sim_case(gpu_handles gpu_handles ARGS eager)
gp_sim_case(gpu_graphs gpu_handles ARGS graphs)
gp_sim_case(gpu_graphs_uncapturable gpu_handles ARGS uncapturable)
gp_sim_case(gpu_multi_device gpu_multi_device ENV "GPSIM_DEVICES=2")

# cuda-bench end to end (its figures are the simulation's and are not checked).
if(TARGET cuda-bench)
  add_test(NAME sim_cuda_bench COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/sim/cuda-bench-smoke.sh
                                       $<TARGET_FILE:cuda-bench> $<TARGET_FILE:gpsim>)
  set_tests_properties(sim_cuda_bench PROPERTIES LABELS sim TIMEOUT 300)
endif()
