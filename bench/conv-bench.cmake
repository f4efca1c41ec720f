# conv-bench: cuDNN's forward convolution alone, per shape of a ResNet-18 (or a list), through
# the legacy API lib/cuda/conv.c uses: conv.c's algorithm rule against every algorithm, NCHW
# against NHWC, the fused form (bench/conv-bench.py sets it beside PyTorch's F.conv2d). CUDA
# builds with cuDNN only; without a usable device it prints why and exits 77. Not installed.
if(GP_HAVE_CUDA AND GP_HAVE_CUDNN)
  add_executable(conv-bench ${CMAKE_CURRENT_LIST_DIR}/conv-bench.c
                            ${CMAKE_CURRENT_LIST_DIR}/bench-spin.cu)
  target_include_directories(conv-bench SYSTEM PRIVATE ${GP_CUDNN_INCLUDE_DIR})
  target_link_libraries(conv-bench PRIVATE CUDA::cudart ${GP_CUDNN_LIBRARY} ${CMAKE_DL_LIBS})
  target_compile_definitions(conv-bench PRIVATE _GNU_SOURCE)
  gp_warnings(conv-bench)
endif()
