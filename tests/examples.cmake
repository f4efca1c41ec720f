# The examples run as tests: what a user copies must work.
add_test(NAME example_quickstart COMMAND quickstart)
set_tests_properties(example_quickstart PROPERTIES LABELS pipeline TIMEOUT 120
                     FAIL_REGULAR_EXPRESSION "item [0-9]+:")
if(TARGET service)
  add_test(NAME example_service COMMAND service)
  set_tests_properties(example_service PROPERTIES LABELS pipeline TIMEOUT 120)
endif()
add_test(NAME example_variable_items COMMAND variable_items)
set_tests_properties(example_variable_items PROPERTIES LABELS pipeline TIMEOUT 120)
