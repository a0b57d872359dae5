# The CPU kernels per capability (Note [CPU capabilities] in core/cpu_capability.h): on x86-64 the
# kernel files are compiled three times, for the baseline, x86-64-v3 (AVX2, FMA) and x86-64-v4
# (AVX-512), into namespaces kiln::cpu::cap_default / cap_avx2 / cap_avx512; kiln::cpu::capability()
# picks one at start-up. KILN_NATIVE=ON compiles everything with -march=native and one set.
# Sets KILN_CPU_CAPS (the sets built) and KILN_CPU_DISPATCH (ON when there is more than one).
if(KILN_NATIVE)
  set(KILN_CPU_CAPS default)
  set(KILN_CPU_DISPATCH OFF)
elseif(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
  set(KILN_CPU_CAPS default avx2 avx512)
  set(KILN_CPU_DISPATCH ON)
else()
  set(KILN_CPU_CAPS default)
  set(KILN_CPU_DISPATCH OFF)
endif()
set(KILN_CPU_FLAGS_default "")
set(KILN_CPU_FLAGS_avx2 -march=x86-64-v3)
set(KILN_CPU_FLAGS_avx512 -march=x86-64-v4)

find_program(KILN_NM NAMES nm llvm-nm-16 llvm-nm REQUIRED)
find_program(KILN_OBJCOPY NAMES objcopy llvm-objcopy-16 llvm-objcopy REQUIRED)
find_program(KILN_READELF NAMES readelf llvm-readelf-16 llvm-readelf REQUIRED)

# kiln_add_cpu_kernels(TARGET SOURCES ... DEPS ...): one OBJECT library per capability
# (kiln_cpu_<cap>), its objects added to TARGET. DEPS give the objects TARGET's usage requirements.
function(kiln_add_cpu_kernels target)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;DEFINITIONS" ${ARGN})
  # The objects change when the renaming launcher does.
  set_source_files_properties(${ARG_SOURCES} PROPERTIES OBJECT_DEPENDS ${CMAKE_SOURCE_DIR}/cmake/kiln-cap-cc.sh)
  foreach(cap ${KILN_CPU_CAPS})
    set(obj kiln_cpu_${cap})
    add_library(${obj} OBJECT ${ARG_SOURCES})
    target_compile_features(${obj} PRIVATE cxx_std_20)
    target_include_directories(${obj} PRIVATE ${KILN_INCLUDE_DIR})
    target_link_libraries(${obj} PRIVATE ${ARG_DEPS})
    target_compile_definitions(${obj} PRIVATE KILN_CPU_CAP=cap_${cap} ${ARG_DEFINITIONS})
    # -fno-trapping-math -fno-math-errno (as PyTorch builds its kernels): Kiln reads neither the FP
    # exception flags nor errno, and without them GCC cannot if-convert the selects of exp_f32,
    # erf_f32 and the clamps on a set without mask registers: at x86-64-v3 and the baseline the
    # exp/GELU/softmax loops stayed scalar ("control flow in loop"), 6-10x slower than AVX-512's
    # (measured on Zen 4, bench_gpt --profile). Neither flag changes a result.
    target_compile_options(${obj} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter
                                          -fno-trapping-math -fno-math-errno> ${KILN_CPU_FLAGS_${cap}})
    if(KILN_NATIVE)
      target_compile_options(${obj} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-march=native>)
    endif()
    if(NOT cap STREQUAL "default")
      set(launcher ${CMAKE_SOURCE_DIR}/cmake/kiln-cap-cc.sh ${cap} ${KILN_NM} ${KILN_OBJCOPY} ${KILN_READELF})
      if(KILN_CCACHE)
        list(APPEND launcher ${KILN_CCACHE})
      endif()
      set_target_properties(${obj} PROPERTIES CXX_COMPILER_LAUNCHER "${launcher}")
    endif()
    target_sources(${target} PRIVATE $<TARGET_OBJECTS:${obj}>)
  endforeach()
endfunction()
