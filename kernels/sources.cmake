# .cu kernels with extern "C" launchers (STYLE: kernels/*.cu), built with the CUDA backend.
file(GLOB GP_KERNEL_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/*.cu)
list(APPEND GP_CUDA_SOURCES ${GP_KERNEL_SOURCES})
