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
# Private headers stay out of the package: CUDA-only code (core/cuda/runtime/check.cuh includes
# cuda_runtime.h), the TCP store's wire format, and the CPU kernel drivers behind kiln::ops.
# tests/consumer checks that every installed header compiles with only <prefix>/include.
foreach(dir core autograd nn optim parallel data models)
  install(DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/${dir}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kiln/${dir}
          FILES_MATCHING PATTERN "*.h"
          PATTERN "*.cuh" EXCLUDE
          PATTERN "tcp_store_detail.h" EXCLUDE
          PATTERN "core/cpu" EXCLUDE
          PATTERN "ops/common.h" EXCLUDE)
endforeach()
install(FILES ${CMAKE_CURRENT_SOURCE_DIR}/kiln.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kiln)
install(EXPORT KilnTargets NAMESPACE kiln:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Kiln)
configure_package_config_file(${CMAKE_CURRENT_SOURCE_DIR}/cmake/KilnConfig.cmake.in
                              ${CMAKE_CURRENT_BINARY_DIR}/KilnConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Kiln)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/KilnConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/KilnConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/KilnConfigVersion.cmake
              ${CMAKE_CURRENT_SOURCE_DIR}/cmake/KilnCudaLibs.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Kiln)
