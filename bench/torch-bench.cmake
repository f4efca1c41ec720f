# torch-bench: gpupipe + LibTorch on a TorchScript model, driven by bench/torch-bench.py for
# the three-way comparison with PyTorch's own loops. Built with libgpupipe-torch.
if(TARGET gpupipe_torch)
  add_executable(torch-bench ${CMAKE_CURRENT_LIST_DIR}/torch-bench.cpp)
  set_target_properties(torch-bench PROPERTIES CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON)
  target_link_libraries(torch-bench PRIVATE gpupipe::gpupipe_torch Threads::Threads)
  target_compile_options(torch-bench PRIVATE -Wall -Wextra $<$<BOOL:${GP_WERROR}>:-Werror>)
endif()
