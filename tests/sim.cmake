# The CUDA backend on the simulated device (label sim): the CUDA pipeline, GPU and model tests
# run with gpsim (sim/*.c) preloaded in place of the CUDA Runtime, cuBLAS(Lt) and cuDNN, so CI
# without a GPU runs the backend's streams, events, copies, graph capture and fault paths, and
# the model runtime's CUDA layers against the host reference (docs/DESIGN.md §11). Not a GPU:
# the kernels are host emulations, cuBLASLt and cuDNN are simulated from their documented
# semantics (the convolution API the conv2d layer uses). Not built in sanitizer presets
# (CUDA is off there). A sim case never skips: no SKIP_RETURN_CODE, and GPT_REQUIRE_DEVICE=1.
# gpu_overlap is not among them: it measures copy engines and kernels running beside each
# other, which the simulated device's host threads on a CI machine's few cores do not; nor is
# encoder_kernels_cuda, which would test the emulations against its own references. The
# tsan-sim preset runs these cases under ThreadSanitizer (CMakePresets.json says which).
if(NOT GP_HAVE_CUDA)
  return()
endif()

# cudart_sim.c the runtime, libs_sim.c cuBLAS / cuBLASLt / cuDNN, kernels_sim.c the model
# runtime's kernels; sim.h what they share.
add_library(gpsim SHARED sim/cudart_sim.c sim/libs_sim.c sim/kernels_sim.c)
target_include_directories(gpsim SYSTEM PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
target_link_libraries(gpsim PRIVATE Threads::Threads ${CMAKE_DL_LIBS} m)
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

foreach(t test_e2e test_policy test_lifecycle test_slot test_varsize test_stress test_tiny_ring
          test_model_tokens test_model_encoder_pipeline test_fail_item)
  gp_sim_case(${t} ${t} ARGS cuda)
endforeach()
gp_sim_case(gpu_fault_sticky gpu_fault_sticky ARGS sticky)
gp_sim_case(gpu_compute_error gpu_fault_sticky ARGS compute)
gp_sim_case(gpu_launch_error gpu_fault_sticky ARGS launch)
gp_sim_case(gpu_no_alloc gpu_no_alloc)
gp_sim_case(gpu_handles gpu_handles ARGS eager)
gp_sim_case(gpu_graphs gpu_handles ARGS graphs)
gp_sim_case(gpu_graphs_uncapturable gpu_handles ARGS uncapturable)
gp_sim_case(gpu_graphs_dnn_in_capture gpu_handles ARGS dnn_in_capture)
if(GP_HAVE_CUDNN) # cuDNN present but unloadable: gp_cuda_cudnn() NULL, the note says why
  gp_sim_case(gpu_handles_no_cudnn gpu_handles ARGS eager ENV "GPSIM_CUDNN=0")
endif()
gp_sim_case(gpu_multi_device gpu_multi_device ENV "GPSIM_DEVICES=2")

# Out of memory at every create call in turn (gpsim's fault hooks: sim/test_fault_sweep.c):
# GP_ENOMEM naming the call, or a fallback with right items; nothing leaked either way.
add_executable(test_fault_sweep sim/test_fault_sweep.c)
target_link_libraries(test_fault_sweep PRIVATE gpupipe_static gp_test_support ${CMAKE_DL_LIBS})
target_include_directories(test_fault_sweep PRIVATE ${PROJECT_SOURCE_DIR}/lib
                                                    ${CMAKE_CURRENT_SOURCE_DIR}/gpu)
target_compile_definitions(test_fault_sweep PRIVATE _GNU_SOURCE)
gp_warnings(test_fault_sweep)
gp_sim_case(fault_sweep test_fault_sweep TIMEOUT 1500) # ~4 minutes on 2 cores

# The model runtime's CUDA layers against the host reference, every precision: every op kind,
# the demo models eager and with CUDA graphs, on cuBLASLt and cuDNN (a convolution left on the
# direct kernel fails: GPT_REQUIRE_CUDNN); the demo models with no fused epilogue anywhere
# (cuBLASLt offers no bias epilogue, cuDNN refuses conv+bias+relu: the bias then runs as a kernel,
# and the note must say so); every op kind without cuDNN (conv2d on the direct kernel).
set(dnn "")
if(GP_HAVE_CUDNN)
  set(dnn "GPT_REQUIRE_CUDNN=1")
endif()
gp_sim_case(model_cuda_ops model_cuda_ops ARGS ops ENV "${dnn}" TIMEOUT 300)
# These three also run under the tsan-sim preset, where each took 7-12 minutes on 2 cores on
# 2026-11-26 (CI beside other work; every convolution's algorithm/form pairs run at create,
# lib/cuda/conv.c, each an emulated convolution); 1-2 minutes here.
gp_sim_case(model_cuda_demo model_cuda_ops ARGS demo ENV "${dnn}" TIMEOUT 1800)
gp_sim_case(model_cuda_graphs model_cuda_ops ARGS graphs ENV "${dnn}" TIMEOUT 1800)
gp_sim_case(model_cuda_profile model_cuda_ops ARGS profile ENV "${dnn}" TIMEOUT 300)
gp_sim_case(model_cuda_no_epilogue model_cuda_ops ARGS demo
            ENV "${dnn};GPSIM_LT_EPILOGUES=0;GPSIM_DNN_FUSED=0" TIMEOUT 1800)
set_tests_properties(sim_model_cuda_no_epilogue PROPERTIES PASS_REGULAR_EXPRESSION
  "demo mlp: backend note: cuBLASLt has no bias-epilogue algorithm[^\n]*its bias runs as a kernel after it.*all comparisons within tolerance")
if(GP_HAVE_CUDNN)
  gp_sim_case(model_cuda_no_cudnn model_cuda_ops ARGS ops ENV "GPSIM_CUDNN=0" TIMEOUT 300)
  # cuDNN's graph-API plans running the convolutions (the legacy algorithms made slower, so the
  # plans win the timing at create), and a plan that computes something else (each must be
  # caught by conv_verify against the direct kernel and passed over): every op kind, every
  # precision, against the host reference.
  gp_sim_case(model_cuda_graph_api model_cuda_ops ARGS ops
              ENV "${dnn};GPSIM_DNN_LEGACY_SLOW=1" TIMEOUT 300)
  gp_sim_case(model_cuda_graph_wrong model_cuda_ops ARGS ops
              ENV "${dnn};GPSIM_DNN_LEGACY_SLOW=1;GPSIM_DNN_GRAPH_WRONG=1" TIMEOUT 300)
  # cuDNN's fused conv + bias + relu computing something else, fast (1.25 conv, or with a
  # folded residual the convolution right and 2 z: caught only by comparing what z adds), and
  # every plan too: each must be caught by conv_verify and passed over, the heuristic's first
  # algorithm's fused form included (a wrong one would be off the host reference).
  # conv-choice.sh checks that a fast, right fused form is chosen, not passed over.
  gp_sim_case(model_cuda_fused_wrong model_cuda_ops ARGS ops
              ENV "${dnn};GPSIM_DNN_LEGACY_SLOW=1;GPSIM_DNN_GRAPH_WRONG=1;GPSIM_DNN_FUSED_WRONG=1"
              TIMEOUT 300)
  # cuDNN plans every convolution but none of its algorithms or plans runs: each convolution
  # moves to the direct kernel at create (NCHW and NHWC), says so in the stats, and computes
  # right, rather than failing every batch.
  gp_sim_case(model_cuda_dnn_refuses model_cuda_ops ARGS ops ENV "GPSIM_DNN_FORWARD_FAIL=1"
              TIMEOUT 300)
  set_tests_properties(sim_model_cuda_dnn_refuses PROPERTIES PASS_REGULAR_EXPRESSION
    "nhwc: residual folded into the conv: backend note: conv2d [^\n]*runs on the direct kernel \\(slow\\): none of cuDNN's algorithms.*all comparisons within tolerance")
endif()

# The README's main job on the simulated device: gp-bench's default sweep of the demo MLP on
# CUDA (batch 1..512: every bucket's GEMM plan), with the plot. Its figures are the
# simulation's and are not checked. (The synthetic workload's spin kernel cannot run here: it
# is gp-bench's own, on the static CUDA runtime, which a preload does not replace.)
if(TARGET gp-bench)
  gp_sim_case(gp_bench_mlp gp-bench TIMEOUT 600
              ARGS --workload mlp --backend cuda --svg ${CMAKE_CURRENT_BINARY_DIR}/sim-gp-bench.svg)
  # gp-bench's --cuda-graphs and --spin-wait: tests/sim/gp-bench-knobs.sh says what is checked.
  add_test(NAME sim_gp_bench_knobs
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/sim/gp-bench-knobs.sh $<TARGET_FILE:gp-bench>
                   $<TARGET_FILE:gpsim>)
  set_tests_properties(sim_gp_bench_knobs PROPERTIES LABELS sim TIMEOUT 300)
endif()

# Transformer encoders (embedding, layernorm, both attention kernels, token-by-token GEMMs with
# cublasLtMatmulAlgoCheck, pooling, l2norm) through variable-size batches, every precision.
gp_sim_case(encoder_cuda encoder_cuda TIMEOUT 600)

# conv-bench's code paths on three small shapes from a file, fp16: the heuristic's candidates,
# every algorithm, the fused form, the graph API's engines, the table, in NCHW and NHWC. Its
# figures are the simulation's and are not checked.
if(TARGET conv-bench)
  file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/conv-bench-shapes.txt
       "# NAME CIN COUT KERNEL STRIDE PAD SIZE COUNT\n"
       "stem 3 8 7 2 3 32 1\nmid 8 16 3 1 1 16 2\ndownsample 8 16 1 2 0 16 1\n")
  gp_sim_case(conv_bench conv-bench TIMEOUT 300
              ARGS --batch 2 --reps 2 --precision fp16 --layouts NCHW,NHWC
                   --shapes ${CMAKE_CURRENT_BINARY_DIR}/conv-bench-shapes.txt)
  # (g), the graph API, checked: tests/sim/conv-graph.sh says what.
  add_test(NAME sim_conv_graph
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/sim/conv-graph.sh $<TARGET_FILE:conv-bench>
                   $<TARGET_FILE:gpsim> ${CMAKE_CURRENT_BINARY_DIR}/conv-graph)
  set_tests_properties(sim_conv_graph PROPERTIES LABELS sim TIMEOUT 300)
endif()

# cuda-bench end to end (its figures are the simulation's and are not checked).
if(TARGET cuda-bench)
  add_test(NAME sim_cuda_bench COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/sim/cuda-bench-smoke.sh
                                       $<TARGET_FILE:cuda-bench> $<TARGET_FILE:gpsim>)
  set_tests_properties(sim_cuda_bench PROPERTIES LABELS sim TIMEOUT 300)
endif()

# conv2d's algorithm timing at create through the pipeline's INFO log (gp-infer --log info):
# the first slot times each convolution at each bucket size, the later slots none.
if(TARGET gp-infer)
  add_test(NAME sim_conv_choice
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/sim/conv-choice.sh $<TARGET_FILE:gp-infer>
                   $<TARGET_FILE:gpsim> ${CMAKE_CURRENT_BINARY_DIR}/conv-choice)
  # 339 s under TSan (tsan-sim) alone on this 2-core VM, 2026-11-26; 870 s in the fresh-clone
  # CI run of 2026-11-27 (two more gp-infer runs, the simulation's slow legacy forward 8 ms)
set_tests_properties(sim_conv_choice PROPERTIES LABELS sim TIMEOUT 1800)
endif()
