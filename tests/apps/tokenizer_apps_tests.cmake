# kiln-tokenize / kiln-make-shards --tokenizer gpt2 / sample_gpt text, end to end (a shell script
# running the real executables; it exits 77 when the GPT-2 tokenizer files are not fetched).
add_test(NAME apps_tokenizer
         COMMAND /bin/bash ${CMAKE_CURRENT_SOURCE_DIR}/apps/tokenizer_apps.sh $<TARGET_FILE_DIR:kiln-tokenize>
                 ${CMAKE_CURRENT_BINARY_DIR}/apps_tokenizer)
set_tests_properties(apps_tokenizer PROPERTIES LABELS "apps;data;cpu" SKIP_RETURN_CODE 77 TIMEOUT 300)
