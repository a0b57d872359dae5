# Sanitizer and fuzzer builds (scripts/sanitize.sh, scripts/fuzz.sh; README, "Sanitizers and fuzzers").
# KILN_SANITIZE=address,undefined | undefined | thread | ...: every C++ file and link gets
# -fsanitize=<list>; UBSan findings abort (no recovery) so a test that trips one fails.
# KILN_FUZZ=ON (clang only): the libraries are also compiled with libFuzzer's coverage
# instrumentation (-fsanitize=fuzzer-no-link) and fuzz/ builds one harness per reader. It implies
# address,undefined. scripts/fuzz.sh builds it with clang and without the tests (build-fuzz/).
set(KILN_SANITIZE "" CACHE STRING "Sanitizers for every C++ file and link, e.g. address,undefined or thread")
option(KILN_FUZZ "Build the libFuzzer harnesses in fuzz/ (clang only; implies KILN_SANITIZE=address,undefined)" OFF)

if(KILN_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "KILN_FUZZ needs clang (libFuzzer), not ${CMAKE_CXX_COMPILER_ID}: "
                        "configure with -DCMAKE_CXX_COMPILER=clang++ (scripts/fuzz.sh does)")
  endif()
  if(KILN_SANITIZE STREQUAL "")
    set(KILN_SANITIZE "address,undefined" CACHE STRING "" FORCE)
  endif()
  if(KILN_SANITIZE MATCHES "thread")
    message(FATAL_ERROR "KILN_FUZZ runs under ASan and UBSan; it cannot be combined with KILN_SANITIZE=thread")
  endif()
endif()

if(NOT KILN_SANITIZE STREQUAL "")
  set(_kiln_san -fsanitize=${KILN_SANITIZE} -fno-omit-frame-pointer)
  if(KILN_SANITIZE MATCHES "undefined")
    list(APPEND _kiln_san -fno-sanitize-recover=undefined)
  endif()
  foreach(_flag ${_kiln_san})
    add_compile_options($<$<COMPILE_LANGUAGE:CXX>:${_flag}>)
  endforeach()
  add_link_options(${_kiln_san})
  if(KILN_FUZZ)
    add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fsanitize=fuzzer-no-link>)
  endif()
  message(STATUS "Kiln: sanitizers ${KILN_SANITIZE}, fuzz harnesses ${KILN_FUZZ}")
endif()

# Under the sanitizers the code that only drives the library (the test suites, the apps) compiles
# at -O0, while the library keeps the build's -O1: an instrumented doctest suite compiles about
# twice as fast (test_safetensors 18.8 -> 9.6 s), an app about 40% faster (train_gpt.cpp 26 -> 15 s).
# With KILN_FUZZ the drivers also go without libFuzzer's coverage: only the libraries' branches
# guide a harness, and the suites (sanitize.sh builds them beside the harnesses) run faster.
set(KILN_SANITIZE_DRIVER_OPT "")
if(NOT KILN_SANITIZE STREQUAL "")
  set(KILN_SANITIZE_DRIVER_OPT $<$<COMPILE_LANGUAGE:CXX>:-O0>)
  if(KILN_FUZZ)
    list(APPEND KILN_SANITIZE_DRIVER_OPT $<$<COMPILE_LANGUAGE:CXX>:-fno-sanitize=fuzzer-no-link>)
  endif()
endif()
