# oneDNN (Debian libdnnl-dev) for the CPU convolutions and f32 GEMM (core/cpu/onednn). Optional:
# KILN_ONEDNN=AUTO uses it when found, ON requires it, OFF builds the plain CPU kernels only.
# Sets KILN_WITH_ONEDNN.
set(KILN_ONEDNN AUTO CACHE STRING "Use oneDNN for CPU convolutions and f32 GEMM: AUTO (when found), ON or OFF")
set_property(CACHE KILN_ONEDNN PROPERTY STRINGS AUTO ON OFF)
set(KILN_WITH_ONEDNN OFF)
if(KILN_ONEDNN STREQUAL "ON")
  find_package(dnnl 2.6 CONFIG REQUIRED)
  set(KILN_WITH_ONEDNN ON)
elseif(KILN_ONEDNN STREQUAL "AUTO" AND NOT KILN_SANITIZE STREQUAL "")
  # Sanitizer and fuzz builds check Kiln's own kernels: oneDNN's JIT code is invisible to them, and
  # its libgomp threads would meet clang's libomp. -DKILN_ONEDNN=ON still forces it.
  message(STATUS "Kiln: KILN_SANITIZE=${KILN_SANITIZE}: building without oneDNN (KILN_ONEDNN=ON forces it)")
elseif(KILN_ONEDNN STREQUAL "AUTO")
  # Debian's oneDNN has an OpenCL GPU runtime and its package config requires OpenCL's dev files
  # (ocl-icd-opencl-dev, only recommended by libdnnl-dev): without them AUTO builds without oneDNN
  # rather than failing.
  find_package(OpenCL QUIET)
  if(OpenCL_FOUND)
    find_package(dnnl 2.6 CONFIG QUIET)
  endif()
  if(dnnl_FOUND)
    set(KILN_WITH_ONEDNN ON)
  else()
    message(STATUS "oneDNN 2.6 not found (libdnnl-dev and ocl-icd-opencl-dev): plain CPU kernels only")
  endif()
endif()
