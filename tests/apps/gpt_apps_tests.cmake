# End-to-end tests of train_gpt / sample_gpt / kiln-make-shards, driven by shell scripts that run the
# real executables and check their JSONL metrics and checkpoints (python3 reads the files). Included
# from tests/CMakeLists.txt when the apps are built.
set(_gpt_apps_dir ${CMAKE_CURRENT_SOURCE_DIR}/apps)
set(_gpt_apps_bins $<TARGET_FILE_DIR:train_gpt>)
foreach(_case converge resume ddp fp16 profile sharding powersgd preempt fit_memory mixed_precision)
  add_test(NAME apps_gpt_${_case}
           COMMAND /bin/bash ${_gpt_apps_dir}/gpt_${_case}.sh ${_gpt_apps_bins} ${CMAKE_CURRENT_BINARY_DIR}/apps_gpt_${_case})
endforeach()
set_tests_properties(apps_gpt_converge apps_gpt_resume apps_gpt_ddp apps_gpt_fp16 apps_gpt_profile apps_gpt_sharding
                     apps_gpt_preempt PROPERTIES LABELS "apps;models;cpu")
set_tests_properties(apps_gpt_converge PROPERTIES TIMEOUT 300)
set_tests_properties(apps_gpt_resume apps_gpt_ddp apps_gpt_fp16 apps_gpt_profile PROPERTIES TIMEOUT 120)
# Eight 300-step runs (alone, resumed, 2 ranks): about 15 s here, several times that under ASan.
set_tests_properties(apps_gpt_preempt PROPERTIES TIMEOUT 300 PROCESSORS 2)
set_tests_properties(apps_gpt_sharding PROPERTIES TIMEOUT 240)
set_tests_properties(apps_gpt_powersgd PROPERTIES LABELS "apps;models;cpu;dist" TIMEOUT 300 PROCESSORS 2)
set_tests_properties(apps_gpt_fit_memory PROPERTIES LABELS "apps;models;cpu;dist" TIMEOUT 120 PROCESSORS 2)
set_tests_properties(apps_gpt_mixed_precision PROPERTIES LABELS "apps;models;cpu;dist" TIMEOUT 240 PROCESSORS 2)

# On the GPU (CUDA builds): CPU-vs-CUDA agreement, bf16, NCCL ranks sharing the device.
if(KILN_WITH_CUDA)
  add_test(NAME apps_gpt_cuda
           COMMAND /bin/bash ${_gpt_apps_dir}/gpt_cuda.sh ${_gpt_apps_bins} ${CMAKE_CURRENT_BINARY_DIR}/apps_gpt_cuda)
  set_tests_properties(apps_gpt_cuda PROPERTIES LABELS "apps;models;gpu" SKIP_RETURN_CODE 77 TIMEOUT 300)
endif()
