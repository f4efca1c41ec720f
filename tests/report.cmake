# Stats, renderings and the doctor (issue 5). Owner: gp-bench / doctor.
gp_add_test(NAME test_doctor SOURCES report/test_doctor.c LABELS pipeline TIMEOUT 120)
gp_add_test(NAME test_stats SOURCES report/test_stats.c LABELS pipeline TIMEOUT 120)
gp_add_test(NAME test_diagnose SOURCES report/test_diagnose.c LABELS unit)
# gp-bench end to end: a tiny sweep, well-formed CSV/JSON/SVG, the ratios line, bad flags.
if(TARGET gp-bench)
  gp_add_test(NAME test_bench_smoke SOURCES report/test_bench_smoke.c LABELS pipeline
              TIMEOUT 180 ARGS $<TARGET_FILE:gp-bench> ${CMAKE_CURRENT_BINARY_DIR}/bench_smoke)
endif()
# The stats window example: a compute-bound pipeline measured after its warm-up.
if(TARGET stats_window)
  add_test(NAME example_stats_window COMMAND stats_window)
  set_tests_properties(example_stats_window PROPERTIES LABELS pipeline TIMEOUT 60)
endif()
