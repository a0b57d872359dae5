# CTest driver (cmake -P) for the embedding story: install the current build into a temporary
# prefix, check the installed headers compile with only <prefix>/include, build tests/consumer from
# a clean directory against the prefix, run it with 1 rank and under kiln-run with 2, build and run
# every program of examples/ from the package (trainer_ddp also under the installed kiln-run with 2
# ranks), and check that every C++ block of README "Embedding Kiln" is one of the consumer's
# compiled sources.
# Inputs (-D): KILN_BUILD_DIR, KILN_SOURCE_DIR, WORK_DIR, CXX, GENERATOR.
cmake_minimum_required(VERSION 3.24)

function(run_step name)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
                  WORKING_DIRECTORY ${WORK_DIR})
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${name} failed (${rc}):\n${out}\n${err}")
  endif()
  set(step_output "${out}${err}" PARENT_SCOPE)
endfunction()

set(prefix ${WORK_DIR}/prefix)
set(consumer_build ${WORK_DIR}/consumer-build)
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})

# 1. Install into a fresh prefix.
run_step("cmake --install" ${CMAKE_COMMAND} --install ${KILN_BUILD_DIR} --prefix ${prefix})

# 2. Public headers: every installed header, with only the installed include dir on the path.
file(GLOB_RECURSE headers RELATIVE ${prefix}/include ${prefix}/include/kiln/*.h)
list(LENGTH headers header_count)
if(header_count LESS 50 OR NOT EXISTS ${prefix}/include/kiln/kiln.h)
  message(FATAL_ERROR "install: expected kiln/kiln.h and the module headers, found ${header_count} headers")
endif()
foreach(private kiln/core/cuda kiln/core/ops kiln/core/cpu kiln/core/kernels kiln/core/dispatch.h
                kiln/core/formulas.h kiln/core/host_device.h kiln/core/philox.h kiln/parallel/tcp_store_detail.h)
  if(EXISTS ${prefix}/include/${private})
    message(FATAL_ERROR "install: internal ${private} was installed (only the user API is)")
  endif()
endforeach()
if(NOT EXISTS ${prefix}/include/kiln/cuda.h)
  message(FATAL_ERROR "install: kiln/cuda.h (the CUDA settings users call) is missing")
endif()
set(tu "#include <kiln/kiln.h>\n")
foreach(h ${headers})
  string(APPEND tu "#include <${h}>\n")
endforeach()
file(WRITE ${WORK_DIR}/all_headers.cpp "${tu}int main() { return 0; }\n")
run_step("compiling every installed header with only -I<prefix>/include"
         ${CXX} -std=c++20 -fsyntax-only -I${prefix}/include ${WORK_DIR}/all_headers.cpp)
file(WRITE ${WORK_DIR}/umbrella.cpp "#include <kiln/kiln.h>\nint main() { return kiln::Tensor().defined(); }\n")
run_step("compiling #include <kiln/kiln.h>" ${CXX} -std=c++20 -fsyntax-only -I${prefix}/include
         ${WORK_DIR}/umbrella.cpp)

# 3. The package holds no path of the build machine (relocatable).
file(GLOB cmake_files ${prefix}/lib*/cmake/Kiln/*.cmake)
foreach(f ${cmake_files})
  file(READ ${f} text)
  foreach(bad "${KILN_BUILD_DIR}" "${KILN_SOURCE_DIR}" "${prefix}")
    string(FIND "${text}" "${bad}" at)
    if(NOT at EQUAL -1)
      message(FATAL_ERROR "install: ${f} contains the absolute path ${bad}")
    endif()
  endforeach()
endforeach()

# 4. Configure and build the consumer from a clean directory, knowing only the prefix.
set(launcher)
find_program(ccache ccache)
if(ccache)
  set(launcher -DCMAKE_CXX_COMPILER_LAUNCHER=${ccache})
endif()
run_step("configuring tests/consumer" ${CMAKE_COMMAND} -S ${KILN_SOURCE_DIR}/tests/consumer -B ${consumer_build}
         -G ${GENERATOR} -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_PREFIX_PATH=${prefix}
         ${launcher})
run_step("building tests/consumer" ${CMAKE_COMMAND} --build ${consumer_build} -j 2)

# 5. Run: the API tour, then the consumer with 1 rank and with 2 under the installed kiln-run.
run_step("kiln_api_tour" ${consumer_build}/kiln_api_tour)
if(NOT step_output MATCHES "api tour ok")
  message(FATAL_ERROR "kiln_api_tour: no 'api tour ok' line:\n${step_output}")
endif()

function(check_consumer_output label output ranks)
  foreach(r RANGE 0 ${ranks})
    if(r EQUAL ranks)
      break()
    endif()
    if(NOT output MATCHES "rank ${r} of ${ranks}: loss first=([0-9.]+) last=([0-9.]+)")
      message(FATAL_ERROR "${label}: no loss line for rank ${r}:\n${output}")
    endif()
    set(first ${CMAKE_MATCH_1})
    set(last ${CMAKE_MATCH_2})
    if(NOT last LESS first)
      message(FATAL_ERROR "${label}: rank ${r}'s loss did not decrease (first=${first} last=${last})")
    endif()
    if(NOT output MATCHES "rank ${r} of ${ranks}: reload equal")
      message(FATAL_ERROR "${label}: rank ${r} did not reload the checkpoint equal:\n${output}")
    endif()
  endforeach()
  message(STATUS "${label}: ok\n${output}")
endfunction()

run_step("kiln_consumer, 1 rank" ${consumer_build}/kiln_consumer ${WORK_DIR}/one_rank.safetensors)
check_consumer_output("kiln_consumer, 1 rank" "${step_output}" 1)
run_step("kiln-run --nproc-per-node 2 kiln_consumer" ${prefix}/bin/kiln-run --nproc-per-node 2 --standalone
         ${consumer_build}/kiln_consumer ${WORK_DIR}/two_ranks.safetensors)
check_consumer_output("kiln_consumer, 2 ranks" "${step_output}" 2)

# 6. The examples from the package, each in a folder of its own (they write into the current
# directory). cuda exits 77 without CUDA or a GPU: accepted there only.
file(GLOB examples ${KILN_SOURCE_DIR}/examples/*.cpp)
list(LENGTH examples example_count)
if(example_count LESS 5)
  message(FATAL_ERROR "examples/: expected at least 5 programs, found ${example_count}")
endif()
foreach(src ${examples})
  get_filename_component(name ${src} NAME_WE)
  set(run_dir ${WORK_DIR}/examples/${name})
  file(MAKE_DIRECTORY ${run_dir})
  execute_process(COMMAND ${consumer_build}/ex_${name} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
                  WORKING_DIRECTORY ${run_dir})
  if(rc EQUAL 77 AND name STREQUAL "cuda")
    message(STATUS "ex_${name} (installed): skipped (no GPU)")
  elseif(NOT rc EQUAL 0)
    message(FATAL_ERROR "ex_${name} built from the installed package failed (${rc}):\n${out}\n${err}")
  else()
    message(STATUS "ex_${name} (installed): ok\n${out}")
  endif()
endforeach()
file(MAKE_DIRECTORY ${WORK_DIR}/examples/trainer_ddp_2ranks)
execute_process(COMMAND ${prefix}/bin/kiln-run --nproc-per-node 2 --standalone ${consumer_build}/ex_trainer_ddp
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
                WORKING_DIRECTORY ${WORK_DIR}/examples/trainer_ddp_2ranks)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "kiln-run --nproc-per-node 2 ex_trainer_ddp (installed) failed (${rc}):\n${out}\n${err}")
endif()

# 7. Every C++ block (```cpp or ```c++) of the "Embedding Kiln" section, in README.md or a page of
# docs/, is compiled: it appears in main.cpp, api_tour.cpp or examples/ (indentation aside).
# (scripts/check-docs.py compiles every whole-program ```cpp block of the docs on its own.)
file(GLOB doc_pages ${KILN_SOURCE_DIR}/docs/*.md)
set(section "")
foreach(page ${KILN_SOURCE_DIR}/README.md ${doc_pages})
  file(READ ${page} text)
  string(REGEX MATCH "\n#+ Embedding Kiln[^\n]*\n" heading "\n${text}")
  if(heading)
    string(FIND "\n${text}" "${heading}" start)
    string(SUBSTRING "\n${text}" ${start} -1 section)
    string(REGEX REPLACE "^\n(#+) .*" "\\1" level "${heading}")
    string(LENGTH "${level}" this_level)
    # The section ends at the next heading of its level or above; a page titled "# Embedding Kiln"
    # is all section. Lines of one '#' are not taken as headings there: shell comments in code blocks.
    string(SUBSTRING "${section}" 1 -1 scan)
    set(offset 1)
    while(this_level GREATER 1)
      string(REGEX MATCH "\n(##+) [^\n]*" next "${scan}")
      if(NOT next)
        break()
      endif()
      string(FIND "${scan}" "${next}" at)
      string(LENGTH "${CMAKE_MATCH_1}" next_level)
      if(next_level LESS_EQUAL this_level)
        math(EXPR end "${offset} + ${at}")
        string(SUBSTRING "${section}" 0 ${end} section)
        break()
      endif()
      math(EXPR skip "${at} + 1")
      string(SUBSTRING "${scan}" ${skip} -1 scan)
      math(EXPR offset "${offset} + ${skip}")
    endwhile()
    file(RELATIVE_PATH section_file ${KILN_SOURCE_DIR} ${page})
    break()
  endif()
endforeach()
if(section STREQUAL "")
  message(FATAL_ERROR "neither README.md nor docs/*.md has an 'Embedding Kiln' section (find_package(Kiln), "
                      "the API tour of tests/consumer/api_tour.cpp)")
endif()
file(READ ${KILN_SOURCE_DIR}/tests/consumer/main.cpp sources)
file(READ ${KILN_SOURCE_DIR}/tests/consumer/api_tour.cpp tour)
string(APPEND sources "\n${tour}")
foreach(src ${examples})
  file(READ ${src} example)
  string(APPEND sources "\n${example}")
endforeach()
string(REGEX REPLACE "\n[ ]+" "\n" sources "${sources}")
# Blocks are cut out with string(FIND) rather than a list: C++ code is full of ';'.
set(block_count 0)
string(REPLACE "```c++\n" "```cpp\n" section "${section}")
while(TRUE)
  string(FIND "${section}" "```cpp\n" open)
  if(open EQUAL -1)
    break()
  endif()
  math(EXPR open "${open} + 7")
  string(SUBSTRING "${section}" ${open} -1 section)
  string(FIND "${section}" "```" close)
  string(SUBSTRING "${section}" 0 ${close} code)
  string(SUBSTRING "${section}" ${close} -1 section)
  string(SUBSTRING "${section}" 3 -1 section)
  string(REGEX REPLACE "\n[ ]+" "\n" code "\n${code}")
  string(FIND "${sources}" "${code}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "${section_file} 'Embedding Kiln': this block is not in tests/consumer/main.cpp, "
                        "api_tour.cpp or examples/, so no test compiles it:\n${code}")
  endif()
  math(EXPR block_count "${block_count} + 1")
endwhile()
if(block_count LESS 1)
  message(FATAL_ERROR "${section_file} 'Embedding Kiln': no C++ block found")
endif()
message(STATUS "${section_file} 'Embedding Kiln': ${block_count} blocks, all compiled")
