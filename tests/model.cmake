# Model runtime tests: loader, spec, host layers (unit); a model as the pipeline's compute on
# every backend (pipeline); PyTorch conformance through gp-infer and the exporter
# (conformance); gp-infer's messages (unit); the loader's libFuzzer target (GP_BUILD_FUZZ,
# clang).
gp_add_test(NAME test_model_loader SOURCES model/test_loader.c LABELS unit)
gp_add_test(NAME test_model_spec SOURCES model/test_spec.c LABELS unit)
gp_add_test(NAME test_model_layers SOURCES model/test_layers.c LABELS unit TIMEOUT 300)
gp_add_pipeline_test(test_model_pipeline SOURCES model/test_model_pipeline.c)
gp_add_pipeline_test(test_model_tokens SOURCES model/test_tokens.c)
# The fuzz target's seed corpus, replayed without libFuzzer in every build.
gp_add_test(NAME test_model_fuzz_replay SOURCES fuzz/fuzz_loader.c fuzz/replay.c LABELS unit
            ARGS ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/corpus)

# Conformance needs Debian's PyTorch (python3-torch, python3-numpy), which lives in the system
# interpreter; the script exits 77 (skip, reason printed) when torch is missing.
if(EXISTS /usr/bin/python3)
  set(GP_CONFORMANCE_PYTHON_DEFAULT /usr/bin/python3)
else()
  find_program(GP_CONFORMANCE_PYTHON_DEFAULT python3)
endif()
set(GP_CONFORMANCE_PYTHON "${GP_CONFORMANCE_PYTHON_DEFAULT}" CACHE FILEPATH
    "Python with torch and numpy for the conformance test")
if(GP_CONFORMANCE_PYTHON AND TARGET gp-infer)
  add_test(NAME model_conformance
           COMMAND ${GP_CONFORMANCE_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/conformance/conformance.py
                   $<TARGET_FILE:gp-infer> ${CMAKE_CURRENT_BINARY_DIR}/conformance)
  set_tests_properties(model_conformance PROPERTIES LABELS "conformance" TIMEOUT 900
                                                    SKIP_RETURN_CODE 77)
  # tools/gpupipe_export.py: modules exported and run through gp-infer against PyTorch, and its
  # error messages. Label conformance: same question (does gpupipe compute what PyTorch
  # computes?) and same needs (torch, torchvision, gp-infer) as model_conformance.
  add_test(NAME model_export
           COMMAND ${GP_CONFORMANCE_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/conformance/test_export.py
                   $<TARGET_FILE:gp-infer> ${CMAKE_CURRENT_BINARY_DIR}/export)
  set_tests_properties(model_export PROPERTIES LABELS "conformance" TIMEOUT 900
                                               SKIP_RETURN_CODE 77)
  # Transformer encoders (torch.nn BERT-style, post-LN and pre-LN; transformers.BertModel where
  # importable) vs PyTorch: each sequence alone and a padded batch with a key padding mask,
  # against all sequences packed in one gpupipe batch.
  add_test(NAME model_encoder_conformance
           COMMAND ${GP_CONFORMANCE_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/conformance/encoder.py
                   $<TARGET_FILE:gp-infer> ${CMAKE_CURRENT_BINARY_DIR}/encoder)
  set_tests_properties(model_encoder_conformance PROPERTIES LABELS "conformance" TIMEOUT 900
                                                            SKIP_RETURN_CODE 77)
  # gp-infer's messages on the usual first mistakes (a torch.save file, float64 input, a
  # missing flag): fast, so unit.
  add_test(NAME gp_infer_messages
           COMMAND ${GP_CONFORMANCE_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/conformance/test_messages.py
                   $<TARGET_FILE:gp-infer> ${CMAKE_CURRENT_BINARY_DIR}/messages)
  set_tests_properties(gp_infer_messages PROPERTIES LABELS "unit" TIMEOUT 120
                                                    SKIP_RETURN_CODE 77)
  # bench/symptom-bench.py, small, on the CPU: every contender runs, and gpupipe's top-1
  # agrees with PyTorch fp32's on every item but near-ties (else exit 1); the script must not
  # rot before the GPU run it exists for.
  add_test(NAME bench_symptom_smoke
           COMMAND ${GP_CONFORMANCE_PYTHON} ${PROJECT_SOURCE_DIR}/bench/symptom-bench.py
                   $<TARGET_FILE:gp-infer> --device cpu --seconds 0.3 --items 512 --size 32
                   --work ${CMAKE_CURRENT_BINARY_DIR}/symptom)
  set_tests_properties(bench_symptom_smoke PROPERTIES LABELS "conformance" TIMEOUT 300
                                                      SKIP_RETURN_CODE 77)
  # bench/layer-bench.py, small, on the CPU: every cut of the ResNet-18 runs on both sides and
  # gpupipe's output matches PyTorch's for each (else exit 1).
  add_test(NAME bench_layer_smoke
           COMMAND ${GP_CONFORMANCE_PYTHON} ${PROJECT_SOURCE_DIR}/bench/layer-bench.py
                   $<TARGET_FILE:gp-infer> --device cpu --size 32 --items 64 --batch 16
                   --batches 3 --work ${CMAKE_CURRENT_BINARY_DIR}/layers)
  set_tests_properties(bench_layer_smoke PROPERTIES LABELS "conformance" TIMEOUT 300
                                                    SKIP_RETURN_CODE 77)
endif()

# libFuzzer target for the loader: tests/fuzz/run.sh builds it in its own tree with clang and
# sanitizers; here it only needs to compile and link.
if(GP_BUILD_FUZZ)
  if(NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "GP_BUILD_FUZZ needs clang (CC=clang)")
  endif()
  add_executable(fuzz_model_loader ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/fuzz_loader.c)
  target_link_libraries(fuzz_model_loader PRIVATE gpupipe_static)
  target_compile_options(fuzz_model_loader PRIVATE -fsanitize=fuzzer)
  target_link_options(fuzz_model_loader PRIVATE -fsanitize=fuzzer)
  gp_warnings(fuzz_model_loader)
  add_test(NAME fuzz_model_loader_seeds
           COMMAND fuzz_model_loader -runs=0 ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/corpus)
  set_tests_properties(fuzz_model_loader_seeds PROPERTIES LABELS "fuzz" TIMEOUT 120)
endif()

# The model examples run as tests: what a user copies must work (AUTO backend: the GPU when
# one is usable, else the host).
foreach(ex mlp_classifier image_classifier text_embedder)
  if(TARGET ${ex})
    add_test(NAME example_${ex} COMMAND ${ex})
    set_tests_properties(example_${ex} PROPERTIES LABELS pipeline TIMEOUT 300)
  endif()
endforeach()
# Transformer encoder layers (embedding, layernorm, attention over packed sequences, pooling,
# l2norm) against a naive reference; their refusals; the demo encoder.
gp_add_test(NAME test_model_encoder SOURCES model/test_encoder.c LABELS unit TIMEOUT 300)
gp_add_pipeline_test(test_model_encoder_pipeline SOURCES model/test_encoder_pipeline.c)
