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

# Data-parallel scenarios run as real processes through kiln-run: dist_worker is a program (one
# rank per process, init_process_group from the environment), not a doctest suite.
add_executable(dist_worker ${CMAKE_CURRENT_SOURCE_DIR}/parallel/dist_worker.cpp)
target_link_libraries(dist_worker PRIVATE kiln::kiln)
set(_dist_tests parallel_dist_equivalence_3)
add_test(NAME parallel_dist_equivalence_3
         COMMAND kiln-run --nproc-per-node 3 --standalone $<TARGET_FILE:dist_worker> equivalence)
foreach(_scenario equivalence accumulate bucket_view mismatch batchnorm order_check)
  add_test(NAME parallel_dist_${_scenario}
           COMMAND kiln-run --nproc-per-node 2 --standalone $<TARGET_FILE:dist_worker> ${_scenario})
  list(APPEND _dist_tests parallel_dist_${_scenario})
endforeach()
# Rank 1 dies at step 3: kiln-run must exit non-zero within 30 s, naming rank 1, and the
# surviving rank must report a collective error naming rank 1 (the script checks all three).
add_test(NAME parallel_dist_kill
         COMMAND /bin/sh ${CMAKE_CURRENT_SOURCE_DIR}/parallel/dist_kill.sh $<TARGET_FILE:kiln-run>
                 $<TARGET_FILE:dist_worker>)
list(APPEND _dist_tests parallel_dist_kill)
# Rank 1 stalls at collective 8 with KILN_DIST_TIMEOUT=3: both ranks fail naming it and exit
# within 10 s, leaving their flight recorders (the watchdog, parallel/watchdog.h).
add_test(NAME parallel_dist_stall
         COMMAND /bin/sh ${CMAKE_CURRENT_SOURCE_DIR}/parallel/dist_stall.sh $<TARGET_FILE:kiln-run>
                 $<TARGET_FILE:dist_worker>)
list(APPEND _dist_tests parallel_dist_stall)
set_tests_properties(${_dist_tests} PROPERTIES LABELS "${_kiln_run_labels}" TIMEOUT 60)

# The same scenarios on the GPU over NCCL (label gpu): two ranks sharing one device, each posing
# as its own host (KILN_TEST_ONE_GPU=1, see dist_worker.cpp). Skipped (exit 77) without a GPU.
if(KILN_WITH_CUDA)
  set(_nccl_tests "")
  foreach(_scenario collectives equivalence accumulate bucket_view batchnorm order_check)
    add_test(NAME parallel_cuda_nccl_${_scenario}
             COMMAND /bin/sh -c "\"$0\" --probe-cuda >/dev/null || exit 77; KILN_TEST_ONE_GPU=1 exec \"$1\" \
--nproc-per-node 2 --standalone \"$0\" ${_scenario} --device cuda"
                     $<TARGET_FILE:dist_worker> $<TARGET_FILE:kiln-run>)
    list(APPEND _nccl_tests parallel_cuda_nccl_${_scenario})
  endforeach()
  set_tests_properties(${_nccl_tests} PROPERTIES LABELS "parallel;dist;gpu" SKIP_RETURN_CODE 77 TIMEOUT 120)
endif()

# Elastic kiln-run on 2-3 hosts made of network namespaces (netns_elastic.sh; each host runs one
# agent and one train_gpt worker): kills of a worker and of a host's agent, restarts that end with
# the uninterrupted run's losses, a host leaving, a checkpoint on one host only, a wrong token and
# a connection flood. Needs root for `ip netns`; exits 77 (skipped) where namespaces are refused.
if(TARGET train_gpt AND TARGET kiln-make-shards)
  set(_elastic_tests "")
  foreach(_scenario kill_worker kill_agent restart leave partial_ckpt token_flood)
    set(_runs 1)
    if(_scenario STREQUAL "kill_agent")
      set(_runs 2)  # the store's host, then the other one
    endif()
    add_test(NAME parallel_elastic_${_scenario}
             COMMAND /bin/bash ${CMAKE_CURRENT_SOURCE_DIR}/parallel/netns_elastic.sh $<TARGET_FILE_DIR:train_gpt>
                     ${CMAKE_CURRENT_BINARY_DIR}/parallel_elastic_${_scenario} ${_scenario} ${_runs})
    list(APPEND _elastic_tests parallel_elastic_${_scenario})
  endforeach()
  set_tests_properties(${_elastic_tests} PROPERTIES LABELS "${_kiln_run_labels}" SKIP_RETURN_CODE 77 TIMEOUT 240
                       PROCESSORS 2)
endif()

# Two elastic agents on loopback (no root needed): variables, per-generation prefix, a joint restart.
add_test(NAME parallel_elastic_loopback
         COMMAND /bin/sh ${CMAKE_CURRENT_SOURCE_DIR}/parallel/elastic_loopback.sh $<TARGET_FILE:kiln-run>)
set_tests_properties(parallel_elastic_loopback PROPERTIES LABELS "${_kiln_run_labels}" TIMEOUT 60)
