# kiln_add_library(NAME SOURCES ... DEPS ...): one library per top-level folder.
# The library is kiln_<name>, aliased kiln::<name>; its public include root is the build's
# include/ directory (source root exposed as include/kiln) or, once installed, <prefix>/include.
function(kiln_add_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  set(target kiln_${name})
  if(ARG_SOURCES)
    add_library(${target} STATIC ${ARG_SOURCES})
    target_link_libraries(${target} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
    target_compile_features(${target} PUBLIC cxx_std_20)  # Kiln's headers are C++20
    target_include_directories(${target} PUBLIC $<BUILD_INTERFACE:${KILN_INCLUDE_DIR}>
                                                $<INSTALL_INTERFACE:include>)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>)
    if(KILN_NATIVE)
      target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-march=native>)
    endif()
  else()
    # A folder whose issue has not landed yet: headers only.
    add_library(${target} INTERFACE)
    target_link_libraries(${target} INTERFACE ${ARG_DEPS})
    target_compile_features(${target} INTERFACE cxx_std_20)
    target_include_directories(${target} INTERFACE $<BUILD_INTERFACE:${KILN_INCLUDE_DIR}>
                                                   $<INSTALL_INTERFACE:include>)
  endif()
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${name})
  add_library(kiln::${name} ALIAS ${target})
  set_property(GLOBAL APPEND PROPERTY KILN_LIBRARIES ${target})
endfunction()
