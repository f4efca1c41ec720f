# pipeline-bench: the core's hand-off against a mutex queue and memcpy (host backend).
add_executable(pipeline-bench ${CMAKE_CURRENT_LIST_DIR}/pipeline-bench.c)
target_link_libraries(pipeline-bench PRIVATE gpupipe::gpupipe Threads::Threads)
target_compile_definitions(pipeline-bench PRIVATE _GNU_SOURCE)
gp_warnings(pipeline-bench)
