# Built-in model runtime (issue: model runtime). Appends to GP_SOURCES / GP_CUDA_SOURCES.
set(GP_MODEL_DIR ${CMAKE_CURRENT_LIST_DIR})
list(APPEND GP_SOURCES
  ${GP_MODEL_DIR}/util.c
  ${GP_MODEL_DIR}/json.c
  ${GP_MODEL_DIR}/safetensors.c
  ${GP_MODEL_DIR}/spec.c
  ${GP_MODEL_DIR}/build.c
  ${GP_MODEL_DIR}/gemm.c
  ${GP_MODEL_DIR}/host.c
  ${GP_MODEL_DIR}/model.c
  ${GP_MODEL_DIR}/demo.c)

# The host layers are the hot path without a GPU: optimize them fully and let the compiler
# contract a*b+c into FMA (the reference tolerance allows it; -std=c11 turns contraction off).
if(CMAKE_C_COMPILER_ID MATCHES "GNU|Clang")
  set_source_files_properties(${GP_MODEL_DIR}/gemm.c ${GP_MODEL_DIR}/host.c
    PROPERTIES COMPILE_OPTIONS "-O3;-ffp-contract=fast")
endif()

# CUDA layers: lib/model/cuda_*.c (C against the CUDA libraries) when present; until then a
# stand-in that reports GP_ENOTSUP.
if(GP_HAVE_CUDA)
  file(GLOB GP_MODEL_CUDA_SOURCES CONFIGURE_DEPENDS ${GP_MODEL_DIR}/cuda_*.c)
  list(REMOVE_ITEM GP_MODEL_CUDA_SOURCES ${GP_MODEL_DIR}/cuda_none.c)
  if(GP_MODEL_CUDA_SOURCES)
    list(APPEND GP_CUDA_SOURCES ${GP_MODEL_CUDA_SOURCES})
  else()
    list(APPEND GP_CUDA_SOURCES ${GP_MODEL_DIR}/cuda_none.c)
  endif()
endif()
