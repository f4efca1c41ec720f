# Built-in model runtime: the IR, loader and host layers (in libgpupipe). The CUDA layers are in
# lib/cuda/ (the CUDA module).
set(GP_MODEL_DIR ${CMAKE_CURRENT_LIST_DIR})
list(APPEND GP_SOURCES
  ${GP_MODEL_DIR}/util.c
  ${GP_MODEL_DIR}/ir.c
  ${GP_MODEL_DIR}/json.c
  ${GP_MODEL_DIR}/safetensors.c
  ${GP_MODEL_DIR}/spec.c
  ${GP_MODEL_DIR}/build.c
  ${GP_MODEL_DIR}/gemm.c
  ${GP_MODEL_DIR}/host.c
  ${GP_MODEL_DIR}/model.c
  ${GP_MODEL_DIR}/profile.c
  ${GP_MODEL_DIR}/demo.c)
# Both libgpupipe and the CUDA module link these (see lib/CMakeLists.txt).
list(APPEND GP_INTERNAL_SOURCES ${GP_MODEL_DIR}/common.c)

# The host layers are the hot path without a GPU: optimize them fully and let the compiler
# contract a*b+c into FMA (the reference tolerance allows it; -std=c11 turns contraction off).
if(CMAKE_C_COMPILER_ID MATCHES "GNU|Clang")
  set_source_files_properties(${GP_MODEL_DIR}/gemm.c ${GP_MODEL_DIR}/host.c
    PROPERTIES COMPILE_OPTIONS "-O3;-ffp-contract=fast")
endif()
