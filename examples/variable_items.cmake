# Variable-size requests packed with no padding, per-request outputs, a token budget, cancel.
gp_example(variable_items ${CMAKE_CURRENT_LIST_DIR}/variable_items.c)
target_link_libraries(variable_items PRIVATE Threads::Threads)
target_compile_definitions(variable_items PRIVATE _GNU_SOURCE)
