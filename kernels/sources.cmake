# .cu kernels with extern "C" launchers. Appends to GP_CUDA_SOURCES.
