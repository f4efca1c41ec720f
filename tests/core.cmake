# Core pipeline tests (ring, batcher, pipeline end to end) on every backend.
gp_add_test(NAME test_ring SOURCES core/test_ring.c LABELS unit TIMEOUT 300)
gp_add_test(NAME test_config SOURCES core/test_config.c LABELS unit)
gp_add_pipeline_test(test_e2e SOURCES core/test_e2e.c)
gp_add_pipeline_test(test_policy SOURCES core/test_policy.c)
gp_add_pipeline_test(test_lifecycle SOURCES core/test_lifecycle.c)
gp_add_test(NAME test_overlap SOURCES core/test_overlap.c LABELS pipeline)
set_tests_properties(test_overlap PROPERTIES RUN_SERIAL TRUE) # timing: keep the cores to itself
gp_add_pipeline_test(test_slot SOURCES core/test_slot.c)
gp_add_pipeline_test(test_varsize SOURCES core/test_varsize.c)
gp_add_pipeline_test(test_fail_item SOURCES core/test_fail_item.c)
gp_add_test(NAME test_promises SOURCES core/test_promises.c LABELS pipeline)

# Out of memory at every allocation in turn (core/test_alloc_fail.c with support/failalloc.c
# preloaded): GP_ENOMEM / GP_ESYS with a message or a result unchanged, nothing leaked; and no
# allocation between create and destroy. Not in sanitizer builds: ASan and TSan own malloc.
if(NOT CMAKE_C_FLAGS MATCHES "-fsanitize")
  add_library(gpfailalloc SHARED support/failalloc.c)
  target_link_libraries(gpfailalloc PRIVATE ${CMAKE_DL_LIBS})
  gp_warnings(gpfailalloc)
  gp_add_test(NAME test_alloc_fail SOURCES core/test_alloc_fail.c LABELS pipeline TIMEOUT 600)
  target_link_libraries(test_alloc_fail PRIVATE ${CMAKE_DL_LIBS})
  set_tests_properties(test_alloc_fail PROPERTIES
    ENVIRONMENT "LD_PRELOAD=$<TARGET_FILE:gpfailalloc>")
endif()
