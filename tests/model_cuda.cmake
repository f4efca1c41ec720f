# The model runtime's CUDA layers against the host reference (issue 4), label gpu. Built only
# with the CUDA backend; without a usable device each case prints why and exits 77 (skipped).
# tests/sim.cmake runs the same binaries on the simulated device (sim_model_cuda_*,
# sim_encoder_cuda), where they never skip.
if(GP_HAVE_CUDA)
  gp_add_test(NAME model_cuda_ops SOURCES model_cuda/test_model_cuda.c ARGS ops LABELS gpu
              TIMEOUT 300)
  foreach(mode demo graphs profile)
    add_test(NAME model_cuda_${mode} COMMAND model_cuda_ops ${mode})
    set_tests_properties(model_cuda_${mode} PROPERTIES LABELS gpu TIMEOUT 300
                                                       SKIP_RETURN_CODE 77)
  endforeach()
  # The same harness with its pipelines on the host backend: keeps every spec, image and check
  # above loadable and passing on machines without a GPU.
  add_test(NAME model_cuda_harness_host COMMAND model_cuda_ops ops host)
  set_tests_properties(model_cuda_harness_host PROPERTIES LABELS pipeline TIMEOUT 120)
  add_test(NAME model_cuda_profile_host COMMAND model_cuda_ops profile host)
  set_tests_properties(model_cuda_profile_host PROPERTIES LABELS pipeline TIMEOUT 120)
endif()

# Transformer encoders: the kernels alone against naive references (every element, every head
# dimension class, both attention kernels), and whole encoder models on the CUDA layers against
# the host layers. Without a device (or, for the models, while the builder lacks the encoder
# ops) they print why and exit 77.
if(GP_HAVE_CUDA)
  gp_add_test(NAME encoder_kernels_cuda SOURCES model_cuda/test_encoder_kernels.c LABELS gpu
              TIMEOUT 300)
  # Fewer and shorter items: the case for compute-sanitizer (memcheck, racecheck, synccheck).
  add_test(NAME encoder_kernels_cuda_quick COMMAND encoder_kernels_cuda quick)
  set_tests_properties(encoder_kernels_cuda_quick PROPERTIES LABELS gpu TIMEOUT 120
                                                             SKIP_RETURN_CODE 77)
  gp_add_test(NAME encoder_cuda SOURCES model_cuda/test_encoder_cuda.c LABELS gpu TIMEOUT 600)
  add_test(NAME encoder_cuda_harness_host COMMAND encoder_cuda host)
  set_tests_properties(encoder_cuda_harness_host PROPERTIES LABELS pipeline TIMEOUT 300
                                                            SKIP_RETURN_CODE 77)
endif()

# The tensor-core attention kernel's index arithmetic re-enacted on the host, lane by lane, from
# the PTX fragment layouts (tests/model_cuda/attention_mma_emul.py): runs in every build, no GPU
# needed; numpy from the conformance interpreter (tests/model.cmake).
if(GP_CONFORMANCE_PYTHON)
  add_test(NAME attention_mma_emul
           COMMAND ${GP_CONFORMANCE_PYTHON}
                   ${CMAKE_CURRENT_SOURCE_DIR}/model_cuda/attention_mma_emul.py)
  set_tests_properties(attention_mma_emul PROPERTIES LABELS unit TIMEOUT 120
                                                     SKIP_RETURN_CODE 77)
endif()

# bench/conv-bench (CUDA builds with cuDNN): every convolution of the ResNet-18 list, both
# layouts, every algorithm, at batch 2, so the benchmark does not rot before the GPU run it
# exists for (its figures are not checked). Without a usable device it prints why and exits 77.
if(TARGET conv-bench)
  add_test(NAME conv_bench_smoke COMMAND conv-bench --batch 2 --reps 1)
  set_tests_properties(conv_bench_smoke PROPERTIES LABELS gpu TIMEOUT 300 SKIP_RETURN_CODE 77)
endif()
