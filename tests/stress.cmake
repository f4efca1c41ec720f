# Found by test_stress: a ring of capacity 1.
gp_add_pipeline_test(test_tiny_ring SOURCES core/test_tiny_ring.c TIMEOUT 60)
