# Decide whether to build libgpupipe-torch (GP_WITH_TORCH: AUTO, ON or OFF), the TorchScript
# compute (include/gpupipe/torch.h). AUTO builds it when find_package(Torch) succeeds: Debian's
# libtorch-dev ships TorchConfig.cmake; for a PyTorch wheel pass
#   -DCMAKE_PREFIX_PATH=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
# Nothing else in the build depends on it. Sets:
#   GP_HAVE_TORCH        the library is built
#   GP_HAVE_TORCH_CUDA   LibTorch has CUDA and gpupipe has its CUDA backend: the compute runs
#                        on the slots' streams (GP_TORCH_CUDA in the source)
#   GP_TORCH_CUDA_CHECK  LibTorch is CPU-only but ships the c10/cuda headers (Debian): the CUDA
#                        path is compiled, not linked, so it keeps compiling on machines
#                        without a CUDA LibTorch
#   GP_TORCH_WHY         why not, when GP_HAVE_TORCH is OFF
set(GP_HAVE_TORCH OFF)
set(GP_HAVE_TORCH_CUDA OFF)
set(GP_TORCH_CUDA_CHECK OFF)
set(GP_TORCH_WHY "")

if(GP_WITH_TORCH STREQUAL "OFF")
  string(CONCAT GP_TORCH_WHY "configured with GP_WITH_TORCH=OFF (the sanitizer presets do: "
         "LibTorch is not instrumented)")
else()
  include(CheckLanguage)
  check_language(CXX)
  if(NOT CMAKE_CXX_COMPILER)
    set(GP_TORCH_WHY "no C++ compiler")
  else()
    enable_language(CXX)
    # LibTorch's CMake (its public/cuda.cmake) rewrites the CUDA architectures and appends
    # -gencode flags for what it detects: gpupipe's own kernels keep the build's choice.
    set(gp_saved_cuda_archs "${CMAKE_CUDA_ARCHITECTURES}")
    set(gp_saved_cuda_flags "${CMAKE_CUDA_FLAGS}")
    find_package(Torch QUIET)
    if(NOT gp_saved_cuda_archs STREQUAL "")
      set(CMAKE_CUDA_ARCHITECTURES "${gp_saved_cuda_archs}")
    endif()
    set(CMAKE_CUDA_FLAGS "${gp_saved_cuda_flags}")
    if(Torch_FOUND AND TARGET torch)
      set(GP_HAVE_TORCH ON)
      if(GP_HAVE_CUDA AND (TARGET torch_cuda OR C10_CUDA_LIBRARY))
        set(GP_HAVE_TORCH_CUDA ON)
      elseif(GP_HAVE_CUDA)
        foreach(dir ${TORCH_INCLUDE_DIRS})
          if(EXISTS ${dir}/c10/cuda/CUDAStream.h)
            set(GP_TORCH_CUDA_CHECK ON)
          endif()
        endforeach()
      endif()
    else()
      string(CONCAT GP_TORCH_WHY "find_package(Torch) found no LibTorch (install libtorch-dev, "
             "or set CMAKE_PREFIX_PATH to a PyTorch wheel's torch.utils.cmake_prefix_path)")
    endif()
  endif()
  if(GP_WITH_TORCH STREQUAL "ON" AND NOT GP_HAVE_TORCH)
    message(FATAL_ERROR "GP_WITH_TORCH=ON but: ${GP_TORCH_WHY}")
  endif()
endif()
