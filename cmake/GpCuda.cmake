# Decide whether to build the CUDA backend (GP_WITH_CUDA) and cuDNN layers (GP_WITH_CUDNN).
# AUTO builds them when nvcc and the libraries are found; the build succeeds without them.
include(CheckLanguage)

set(GP_HAVE_CUDA OFF)
set(GP_HAVE_CUDNN OFF)

if(NOT GP_WITH_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 80 86 89 90)
    endif()
    # One CUDA runtime: the shared one the library links (never the static copy as well).
    set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
    enable_language(CUDA)
    find_package(CUDAToolkit)
    if(CUDAToolkit_FOUND AND TARGET CUDA::cublasLt)
      set(GP_HAVE_CUDA ON)
    endif()
  endif()
  if(GP_WITH_CUDA STREQUAL "ON" AND NOT GP_HAVE_CUDA)
    message(FATAL_ERROR "GP_WITH_CUDA=ON but nvcc, the CUDA runtime or cuBLASLt was not found")
  endif()
endif()

if(GP_HAVE_CUDA AND NOT GP_WITH_CUDNN STREQUAL "OFF")
  find_path(GP_CUDNN_INCLUDE_DIR cudnn.h
            HINTS ${CUDAToolkit_INCLUDE_DIRS} ENV CUDNN_ROOT PATH_SUFFIXES include)
  find_library(GP_CUDNN_LIBRARY cudnn
               HINTS ${CUDAToolkit_LIBRARY_DIR} ENV CUDNN_ROOT PATH_SUFFIXES lib lib64)
  if(GP_CUDNN_INCLUDE_DIR AND GP_CUDNN_LIBRARY)
    set(GP_HAVE_CUDNN ON)
  elseif(GP_WITH_CUDNN STREQUAL "ON")
    message(FATAL_ERROR "GP_WITH_CUDNN=ON but cudnn.h / libcudnn were not found")
  endif()
endif()
if(GP_WITH_CUDNN STREQUAL "ON" AND NOT GP_HAVE_CUDA)
  message(FATAL_ERROR "GP_WITH_CUDNN=ON needs the CUDA backend")
endif()
