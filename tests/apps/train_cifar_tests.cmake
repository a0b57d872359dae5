# End-to-end tests of apps/train_cifar (tests/apps/train_cifar_test.sh runs it and checks its JSONL
# metrics): accuracy on the synthetic set, 2 Gloo ranks vs 1 rank at the same global batch (with
# and without --sync-bn), --sharding zero1/zero2/full against DDP, 2
# ranks started through SLURM's variables (no kiln-run) training as one job, resume, SIGTERM inside
# an epoch then resume (preempt), and bad input. Included from tests/CMakeLists.txt when train_cifar
# and kiln-run are built.
foreach(_mode accuracy ddp sharding syncbn slurm resume preempt errors)
  add_test(NAME apps_train_cifar_${_mode}
           COMMAND /bin/sh ${CMAKE_CURRENT_SOURCE_DIR}/apps/train_cifar_test.sh ${_mode}
                   $<TARGET_FILE:train_cifar> $<TARGET_FILE:kiln-run>)
endforeach()
set_tests_properties(apps_train_cifar_accuracy apps_train_cifar_resume
                     PROPERTIES LABELS "apps;cpu" TIMEOUT 300 PROCESSORS 2)
set_tests_properties(apps_train_cifar_ddp apps_train_cifar_sharding apps_train_cifar_preempt apps_train_cifar_syncbn apps_train_cifar_slurm PROPERTIES LABELS "apps;cpu;dist" TIMEOUT 300 PROCESSORS 2)
set_tests_properties(apps_train_cifar_errors PROPERTIES LABELS "apps;cpu" TIMEOUT 60)
