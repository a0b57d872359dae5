# The benchmarks' Python sides found from a moved build folder, and the shared --dtype flag, on the
# real executables (tests/apps/bench_apps.sh). Included from tests/CMakeLists.txt when the
# benchmarks and training apps are built.
add_test(NAME apps_bench_relocated COMMAND /bin/sh ${CMAKE_CURRENT_SOURCE_DIR}/apps/bench_apps.sh
                                           $<TARGET_FILE_DIR:bench_ops>)
set_tests_properties(apps_bench_relocated PROPERTIES LABELS "apps;cpu" TIMEOUT 180)
# bench_gpt --estimate-memory --sharding: the memory planner's table (tests/apps/bench_memory_plan.sh).
add_test(NAME apps_bench_memory_plan COMMAND /bin/sh ${CMAKE_CURRENT_SOURCE_DIR}/apps/bench_memory_plan.sh
                                             $<TARGET_FILE_DIR:bench_gpt>)
set_tests_properties(apps_bench_memory_plan PROPERTIES LABELS "apps;cpu" TIMEOUT 60)
