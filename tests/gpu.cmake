# GPU tests (issue 3: CUDA backend), label gpu. A test that needs a device prints why and exits
# 77 without one (ctest: skipped). The backend-choice cases need no device and run in every
# build, with or without CUDA. The <name>_cuda variants of the pipeline tests come from
# gp_add_pipeline_test (labels pipeline;gpu).

# gp_gpu_case(test exe [ARGS ...] [ENV ...] [TIMEOUT s]): one more case of an existing binary.
function(gp_gpu_case test exe)
  cmake_parse_arguments(G "" "TIMEOUT" "ARGS;ENV" ${ARGN})
  if(NOT G_TIMEOUT)
    set(G_TIMEOUT 120)
  endif()
  add_test(NAME ${test} COMMAND ${exe} ${G_ARGS})
  set_tests_properties(${test} PROPERTIES LABELS gpu TIMEOUT ${G_TIMEOUT} SKIP_RETURN_CODE 77)
  if(G_ENV)
    set_tests_properties(${test} PROPERTIES ENVIRONMENT "${G_ENV}")
  endif()
endfunction()

# Backend choice: CUDA_VISIBLE_DEVICES=-1 hides every device, so these behave the same on a
# GPU machine as on one without.
gp_add_test(NAME gpu_nodev SOURCES gpu/test_backend_choice.c ARGS nodev LABELS gpu TIMEOUT 60)
set_tests_properties(gpu_nodev PROPERTIES ENVIRONMENT "CUDA_VISIBLE_DEVICES=-1")
gp_gpu_case(gpu_nodev_range gpu_nodev ARGS range TIMEOUT 60)
gp_gpu_case(gpu_auto_fallback gpu_nodev ARGS fallback ENV "CUDA_VISIBLE_DEVICES=-1" TIMEOUT 60)
gp_gpu_case(gpu_auto_cuda gpu_nodev ARGS auto TIMEOUT 60)

# The CUDA gate's host bookkeeping (support/gpt.c), with host threads standing in for the
# gate kernels: runs in every build.
gp_add_test(NAME gpu_gate_records SOURCES gpu/test_gate.c LABELS unit TIMEOUT 60)

if(GP_HAVE_CUDA)
  # Faults: a trapping kernel (sticky), a compute error, a stray launch error (non-sticky).
  gp_add_test(NAME gpu_fault_sticky SOURCES gpu/test_fault.c CUDA_SOURCES gpu/gpu_kernels.cu
              ARGS sticky LABELS gpu TIMEOUT 120)
  # Alone: under MPS a client's fatal fault ends every client of the GPU, which would fail
  # whatever GPU test ctest -j runs beside it.
  set_tests_properties(gpu_fault_sticky PROPERTIES RUN_SERIAL TRUE)
  gp_gpu_case(gpu_compute_error gpu_fault_sticky ARGS compute)
  gp_gpu_case(gpu_launch_error gpu_fault_sticky ARGS launch)

  # Overlap from the pipeline's event timestamps, with the tests' spin kernel (gpu_kernels.cu).
  gp_add_test(NAME gpu_overlap SOURCES gpu/test_overlap.c CUDA_SOURCES gpu/gpu_kernels.cu ARGS 2
              LABELS gpu TIMEOUT 120)
  gp_gpu_case(gpu_overlap_3slots gpu_overlap ARGS 3)
  set_tests_properties(gpu_overlap gpu_overlap_3slots PROPERTIES RUN_SERIAL TRUE)

  gp_add_test(NAME gpu_no_alloc SOURCES gpu/test_no_alloc.c LABELS gpu TIMEOUT 180)

  # gpupipe/cuda.h handles, cuBLAS in the compute, CUDA graphs and their eager fallback.
  gp_add_test(NAME gpu_handles SOURCES gpu/test_handles.c ARGS eager LABELS gpu TIMEOUT 120)
  gp_gpu_case(gpu_graphs gpu_handles ARGS graphs)
  gp_gpu_case(gpu_graphs_uncapturable gpu_handles ARGS uncapturable)
  gp_gpu_case(gpu_graphs_dnn_in_capture gpu_handles ARGS dnn_in_capture)

  gp_add_test(NAME gpu_multi_device SOURCES gpu/test_multi_device.c LABELS gpu TIMEOUT 120)
endif()
