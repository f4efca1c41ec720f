# Built-in model runtime (issue: model runtime). Appends to GP_SOURCES / GP_CUDA_SOURCES.
