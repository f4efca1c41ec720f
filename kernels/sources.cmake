# The CUDA kernels the library ships (extern "C" launchers, lib/cuda/kernels.h): part of the
# CUDA module. Test-only kernels live in tests/, benchmark kernels in bench/.
set(GP_KERNEL_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/prep.cu
  ${CMAKE_CURRENT_LIST_DIR}/act.cu
  ${CMAKE_CURRENT_LIST_DIR}/post.cu
  ${CMAKE_CURRENT_LIST_DIR}/pad.cu
  ${CMAKE_CURRENT_LIST_DIR}/tokens.cu
  ${CMAKE_CURRENT_LIST_DIR}/encoder.cu
  ${CMAKE_CURRENT_LIST_DIR}/attention.cu)
