# The model runtime's CUDA layers against the host reference (issue 4), label gpu. Built only
# with the CUDA backend; without a usable device each case prints why and exits 77 (skipped).
if(GP_HAVE_CUDA)
  gp_add_test(NAME model_cuda_ops SOURCES model_cuda/test_model_cuda.c ARGS ops LABELS gpu
              TIMEOUT 300)
  foreach(mode demo graphs)
    add_test(NAME model_cuda_${mode} COMMAND model_cuda_ops ${mode})
    set_tests_properties(model_cuda_${mode} PROPERTIES LABELS gpu TIMEOUT 300
                                                       SKIP_RETURN_CODE 77)
  endforeach()
  # The same harness with its pipelines on the host backend: keeps every spec, image and check
  # above loadable and passing on machines without a GPU.
  add_test(NAME model_cuda_harness_host COMMAND model_cuda_ops ops host)
  set_tests_properties(model_cuda_harness_host PROPERTIES LABELS pipeline TIMEOUT 120)
endif()
