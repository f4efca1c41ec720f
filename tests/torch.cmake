# libgpupipe-torch (label torch): PyTorch writes TorchScript fixtures and eager reference outputs
# at test time (torch_fixtures, Debian's python3-torch and python3-torchvision), then test_torch
# runs them through pipelines from C: host always, CUDA (labels torch;gpu) when built with it.
# Without LibTorch the torch tests report skipped, with the reason.
if(EXISTS /usr/bin/python3)
  set(GP_TORCH_PYTHON_DEFAULT /usr/bin/python3)
else()
  find_program(GP_TORCH_PYTHON_DEFAULT python3)
endif()
set(GP_TORCH_PYTHON "${GP_TORCH_PYTHON_DEFAULT}" CACHE FILEPATH
    "Python with torch and torchvision for the torch tests' fixtures")

if(TARGET gpupipe_torch)
  set(GP_TORCH_FIXTURES ${CMAKE_CURRENT_BINARY_DIR}/torch_fixtures)
  add_test(NAME torch_fixtures
           COMMAND ${GP_TORCH_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/torch/make_fixtures.py
                   ${GP_TORCH_FIXTURES})
  set_tests_properties(torch_fixtures PROPERTIES LABELS torch TIMEOUT 300 SKIP_RETURN_CODE 77
                                                 FIXTURES_SETUP gp_torch_fixtures)

  add_executable(test_torch ${CMAKE_CURRENT_SOURCE_DIR}/torch/test_torch.c)
  target_link_libraries(test_torch PRIVATE gpupipe_torch gpupipe Threads::Threads m)
  target_include_directories(test_torch PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/support)
  target_compile_definitions(test_torch PRIVATE _GNU_SOURCE)
  gp_warnings(test_torch)
  add_test(NAME test_torch_host COMMAND test_torch host ${GP_TORCH_FIXTURES})
  # PyTorch's intra-op threads take every core: PROCESSORS keeps the timing-sensitive pipeline
  # tests from running beside the torch tests under ctest -j.
  set_tests_properties(test_torch_host PROPERTIES LABELS torch TIMEOUT 600 SKIP_RETURN_CODE 77
                                                  FIXTURES_REQUIRED gp_torch_fixtures
                                                  PROCESSORS 2)
  if(GP_HAVE_CUDA)
    add_test(NAME test_torch_cuda COMMAND test_torch cuda ${GP_TORCH_FIXTURES})
    set_tests_properties(test_torch_cuda PROPERTIES LABELS "torch;gpu" TIMEOUT 600
                                                    SKIP_RETURN_CODE 77
                                                    FIXTURES_REQUIRED gp_torch_fixtures PROCESSORS 2)
  endif()

  # The example, on a ResNet-18 scripted at test time, checked against eager logits.
  if(TARGET torch_service)
    set(GP_TORCH_EXAMPLE ${CMAKE_CURRENT_BINARY_DIR}/torch_example)
    add_test(NAME torch_example_model
             COMMAND ${GP_TORCH_PYTHON} ${PROJECT_SOURCE_DIR}/examples/make_resnet18_ts.py
                     ${GP_TORCH_EXAMPLE}/resnet18.pt --images 24 ${GP_TORCH_EXAMPLE})
    set_tests_properties(torch_example_model PROPERTIES LABELS torch TIMEOUT 300
                         SKIP_RETURN_CODE 77 FIXTURES_SETUP gp_torch_example PROCESSORS 2)
    add_test(NAME example_torch_service
             COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/torch/run_example.sh
                     $<TARGET_FILE:torch_service> ${GP_TORCH_EXAMPLE})
    set_tests_properties(example_torch_service PROPERTIES LABELS torch TIMEOUT 600
                         SKIP_RETURN_CODE 77 FIXTURES_REQUIRED gp_torch_example PROCESSORS 2)
  endif()
else()
  add_test(NAME test_torch_host
           COMMAND sh -c "echo \"SKIP: libgpupipe-torch is not built: $0\"; exit 77"
                   "${GP_TORCH_WHY}")
  set_tests_properties(test_torch_host PROPERTIES LABELS torch SKIP_RETURN_CODE 77)
endif()
