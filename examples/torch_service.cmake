# Your own PyTorch model: a TorchScript ResNet-18 behind the pipeline (libgpupipe-torch, built
# when LibTorch is found; tests/torch.cmake runs it against PyTorch eager).
if(TARGET gpupipe_torch)
  add_executable(torch_service ${CMAKE_CURRENT_LIST_DIR}/torch_service.cpp)
  set_target_properties(torch_service PROPERTIES CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON)
  target_link_libraries(torch_service PRIVATE gpupipe::gpupipe_torch Threads::Threads)
  target_compile_options(torch_service PRIVATE -Wall -Wextra $<$<BOOL:${GP_WERROR}>:-Werror>)
endif()
