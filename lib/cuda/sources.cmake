# CUDA backend (issue: CUDA backend). Appends to GP_CUDA_SOURCES.
# backend.c: the device interface on the CUDA Runtime, the public gpupipe/cuda.h accessors and
# the internal test hooks (cuda_internal.h). C, compiled with the CUDA include dirs; NVTX is
# header-only (nvtx3 in the toolkit), and its loader uses dlopen.
list(APPEND GP_CUDA_SOURCES ${CMAKE_CURRENT_LIST_DIR}/backend.c)
list(APPEND GP_CUDA_LIBS ${CMAKE_DL_LIBS})
