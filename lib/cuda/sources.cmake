# The CUDA backend and the CUDA model layers: one home, lib/cuda/ (docs/DESIGN.md §5).
# GP_CUDA_MODULE_SOURCES build the module libgpupipe-cuda.so (and go into the static library);
# GP_CUDA_CORE_SOURCES build into libgpupipe itself: the public gpupipe/cuda.h accessors, which
# read handles the module filled and call no CUDA function (so libgpupipe needs no CUDA library).
set(GP_CUDA_MODULE_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/module.c
  ${CMAKE_CURRENT_LIST_DIR}/backend.c
  ${CMAKE_CURRENT_LIST_DIR}/check.c
  ${CMAKE_CURRENT_LIST_DIR}/model.c
  ${CMAKE_CURRENT_LIST_DIR}/linear.c
  ${CMAKE_CURRENT_LIST_DIR}/conv.c
  ${CMAKE_CURRENT_LIST_DIR}/conv_graph.c
  ${CMAKE_CURRENT_LIST_DIR}/attention.c)
set(GP_CUDA_CORE_SOURCES ${CMAKE_CURRENT_LIST_DIR}/access.c)
