# Warnings for the project's own targets: gp_warnings(target).
function(gp_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:C>:-Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes
                            -Wno-unused-parameter -Wpointer-arith -Wvla>
    $<$<AND:$<COMPILE_LANGUAGE:C>,$<BOOL:${GP_WERROR}>>:-Werror>
    $<$<AND:$<COMPILE_LANGUAGE:CUDA>,$<BOOL:${GP_WERROR}>>:-Werror=all-warnings>)
endfunction()
