# cmake --install lays headers out as they are included: <prefix>/include/kiln/core/tensor.h.
# Embedders: find_package(Kiln) then target_link_libraries(app PRIVATE kiln::kiln). The package is
# relocatable: every path in it is relative to the prefix it was installed into.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

get_property(_kiln_libs GLOBAL PROPERTY KILN_LIBRARIES)
install(TARGETS ${_kiln_libs} kiln EXPORT KilnTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# Only the user API is installed (what kiln.h reaches, plus kiln/cuda.h): not the raw kernels
# (core/ops, core/cpu, their declarations in core/kernels), not the CUDA launchers, runtime
# internals and plan math (core/cuda), not the TCP store's wire format. tests/consumer checks that
# every installed header compiles with only <prefix>/include, and tests/core/test_public_api that
# kiln.h reaches no internal header.
foreach(dir core autograd nn optim parallel data models)
  install(DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/${dir}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kiln/${dir}
          FILES_MATCHING PATTERN "*.h"
          PATTERN "tcp_store_detail.h" EXCLUDE
          PATTERN "tcp_store_server_core.h" EXCLUDE
          PATTERN "trainer_graph.h" EXCLUDE      # the Trainer's CUDA-graph state, internal to parallel/
          PATTERN "core/cuda" EXCLUDE
          PATTERN "core/cpu" EXCLUDE
          PATTERN "core/kernels" EXCLUDE
          PATTERN "core/ops" EXCLUDE
          PATTERN "core/dispatch.h" EXCLUDE      # the kernels' dtype switch
          PATTERN "core/formulas.h" EXCLUDE      # formulas both backends' kernels compute
          PATTERN "core/host_device.h" EXCLUDE   # KILN_HOST_DEVICE, for kernel code
          PATTERN "core/philox.h" EXCLUDE)       # the random kernels' counter-based generator
endforeach()
install(FILES ${CMAKE_CURRENT_SOURCE_DIR}/kiln.h ${CMAKE_CURRENT_SOURCE_DIR}/cuda.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kiln)
install(EXPORT KilnTargets NAMESPACE kiln:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Kiln)
configure_package_config_file(${CMAKE_CURRENT_SOURCE_DIR}/cmake/KilnConfig.cmake.in
                              ${CMAKE_CURRENT_BINARY_DIR}/KilnConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Kiln)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/KilnConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/KilnConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/KilnConfigVersion.cmake
              ${CMAKE_CURRENT_SOURCE_DIR}/cmake/KilnCudaLibs.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Kiln)
# The license text beside the package (SPDX identifier: KILN_SPDX_LICENSE, also Kiln_LICENSE after
# find_package(Kiln)).
if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/LICENSE)
  install(FILES ${CMAKE_CURRENT_SOURCE_DIR}/LICENSE DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/kiln)
endif()
