# The CUDA kernels the library ships, each file with the CUDA layers that launch them
# (lib/cuda/layers.h): part of the CUDA module. Every .cu here is built, so a new layer's file
# needs no edit of a build file (docs/DESIGN.md §10). Test-only kernels live in tests/,
# benchmark kernels in bench/.
file(GLOB GP_KERNEL_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/*.cu)
list(SORT GP_KERNEL_SOURCES)
