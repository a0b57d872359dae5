# End-to-end tests of the kiln-run executable (the launcher logic itself is tested through
# kiln::dist::launch in test_launcher.cpp). Included from tests/CMakeLists.txt when kiln-run is built.
set(_kiln_run_labels "parallel;dist;cpu")

add_test(NAME parallel_kiln_run_world_size
         COMMAND kiln-run --nproc-per-node 3 --standalone /bin/sh -c "test \"$WORLD_SIZE\" = 3 && test \"$RANK\" -lt 3")
add_test(NAME parallel_kiln_run_failing_rank
         COMMAND kiln-run --nproc-per-node 2 --standalone /bin/sh -c "exit $RANK")
set_tests_properties(parallel_kiln_run_failing_rank PROPERTIES WILL_FAIL TRUE)
# Exact exit codes, output, flag pass-through, bad input and signal forwarding.
add_test(NAME parallel_kiln_run_cli
         COMMAND /bin/sh ${CMAKE_CURRENT_SOURCE_DIR}/parallel/kiln_run_cli.sh $<TARGET_FILE:kiln-run>)
set_tests_properties(parallel_kiln_run_world_size parallel_kiln_run_failing_rank parallel_kiln_run_cli
                     PROPERTIES LABELS "${_kiln_run_labels}" TIMEOUT 60)
