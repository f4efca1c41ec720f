# Install: headers, both libraries, gpupipe.pc and a CMake package (gpupipe::gpupipe).
include(CMakePackageConfigHelpers)

install(TARGETS gpupipe gpupipe_static EXPORT gpupipeTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
# The CUDA module goes beside libgpupipe, where the library looks for it first.
if(TARGET gpupipe-cuda)
  install(TARGETS gpupipe-cuda LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
endif()
install(DIRECTORY include/gpupipe DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.h" PATTERN "torch.h" EXCLUDE)
install(FILES ${PROJECT_BINARY_DIR}/include/gpupipe/version.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/gpupipe)

# pkg-config: private libs are what a static link needs.
set(GP_PC_LIBS_PRIVATE "-lpthread -lm")
if(GP_HAVE_CUDA)
  # Only the static library links CUDA (libgpupipe loads its CUDA module at run time).
  string(APPEND GP_PC_LIBS_PRIVATE " -L${CUDAToolkit_LIBRARY_DIR} -lcudart -lcublas -lcublasLt")
  if(GP_HAVE_CUDNN)
    string(APPEND GP_PC_LIBS_PRIVATE " -lcudnn")
  endif()
  string(APPEND GP_PC_LIBS_PRIVATE " -lstdc++ -ldl")
endif()
# Cflags: what gpupipe/cuda.h needs in a CUDA build (the CMake targets carry the same
# definitions): GP_HAVE_CUDA / GP_HAVE_CUDNN and the CUDA (and cuDNN) headers' directories.
set(GP_PC_CFLAGS "")
if(GP_HAVE_CUDA)
  set(GP_PC_CFLAGS "-DGP_HAVE_CUDA")
  foreach(dir ${CUDAToolkit_INCLUDE_DIRS})
    string(APPEND GP_PC_CFLAGS " -I${dir}")
  endforeach()
  if(GP_HAVE_CUDNN)
    string(APPEND GP_PC_CFLAGS " -DGP_HAVE_CUDNN")
    if(NOT GP_CUDNN_INCLUDE_DIR IN_LIST CUDAToolkit_INCLUDE_DIRS)
      string(APPEND GP_PC_CFLAGS " -I${GP_CUDNN_INCLUDE_DIR}")
    endif()
  endif()
endif()
# Relocatable: the prefix is found from the .pc file's own directory.
file(RELATIVE_PATH GP_PC_TO_PREFIX "/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/")
string(REGEX REPLACE "/$" "" GP_PC_TO_PREFIX "${GP_PC_TO_PREFIX}")
configure_file(pkgconfig/gpupipe.pc.in ${PROJECT_BINARY_DIR}/gpupipe.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/gpupipe.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# libgpupipe-torch, its headers and gpupipe-torch.pc, only when built (cmake/GpTorch.cmake).
# LibTorch is a private dependency of the shared library: consumers need its runtime only.
if(TARGET gpupipe_torch)
  install(TARGETS gpupipe_torch EXPORT gpupipeTargets
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
          RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  install(FILES include/gpupipe/torch.h include/gpupipe/torch.hpp
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/gpupipe)
  configure_file(pkgconfig/gpupipe-torch.pc.in ${PROJECT_BINARY_DIR}/gpupipe-torch.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/gpupipe-torch.pc
          DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endif()

set(GP_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/gpupipe)
install(EXPORT gpupipeTargets NAMESPACE gpupipe:: DESTINATION ${GP_CMAKE_DIR})
configure_package_config_file(cmake/gpupipeConfig.cmake.in
  ${PROJECT_BINARY_DIR}/gpupipeConfig.cmake INSTALL_DESTINATION ${GP_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/gpupipeConfigVersion.cmake
  COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/gpupipeConfig.cmake
              ${PROJECT_BINARY_DIR}/gpupipeConfigVersion.cmake DESTINATION ${GP_CMAKE_DIR})
