# A window after the warm-up, diagnosed as data (gp_pipeline_mark, gp_stats_diagnose).
gp_example(stats_window ${CMAKE_CURRENT_LIST_DIR}/stats_window.c)
target_link_libraries(stats_window PRIVATE Threads::Threads)
