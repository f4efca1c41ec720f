# Stats, renderings and the doctor (issue 5). Owner: gp-bench / doctor.
gp_add_test(NAME test_doctor SOURCES report/test_doctor.c LABELS pipeline TIMEOUT 120)
gp_add_test(NAME test_stats SOURCES report/test_stats.c LABELS pipeline TIMEOUT 120)
gp_add_test(NAME test_diagnose SOURCES report/test_diagnose.c LABELS unit)
