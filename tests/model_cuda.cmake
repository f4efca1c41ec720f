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
endif()
