# CUDA backend (issue: CUDA backend). Appends to GP_CUDA_SOURCES.
