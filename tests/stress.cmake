# Randomized stress: many short rounds of random configs, producers and destroys.
gp_add_pipeline_test(test_stress SOURCES core/test_stress.c TIMEOUT 300)
# Found by test_stress: a ring of capacity 1.
gp_add_pipeline_test(test_tiny_ring SOURCES core/test_tiny_ring.c TIMEOUT 60)
