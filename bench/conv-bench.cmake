# conv-bench: cuDNN's forward convolution alone, per shape of a ResNet-18 (or a list), through
# the legacy API lib/cuda/conv.c uses: conv.c's algorithm rule against every algorithm, NCHW
# against NHWC, the fused form (bench/conv-bench.py sets it beside PyTorch's F.conv2d). CUDA
# builds with cuDNN only; without a usable device it prints why and exits 77. Not installed.
if(GP_HAVE_CUDA AND GP_HAVE_CUDNN)
  # (g) runs the library's own graph-API code (lib/cuda/conv_graph.c: cuDNN only, no gpupipe)
  add_executable(conv-bench ${CMAKE_CURRENT_LIST_DIR}/conv-bench.c
                            ${CMAKE_CURRENT_LIST_DIR}/bench-spin.cu
                            ${PROJECT_SOURCE_DIR}/lib/cuda/conv_graph.c)
  target_include_directories(conv-bench SYSTEM PRIVATE ${GP_CUDNN_INCLUDE_DIR})
  target_include_directories(conv-bench PRIVATE ${PROJECT_SOURCE_DIR}/lib/cuda)
  target_link_libraries(conv-bench PRIVATE CUDA::cudart ${GP_CUDNN_LIBRARY} ${CMAKE_DL_LIBS})
  target_compile_definitions(conv-bench PRIVATE _GNU_SOURCE GP_HAVE_CUDNN)
  gp_warnings(conv-bench)
endif()
