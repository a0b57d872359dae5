# CUDA is optional: KILN_CUDA=AUTO turns it on when nvcc is found.
# Sets KILN_WITH_CUDA and, when on, the imported targets kiln::cudnn and kiln::nccl
# (KilnCudaLibs.cmake, which the installed package uses too).
set(KILN_WITH_CUDA OFF)
if(NOT KILN_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(KILN_WITH_CUDA ON)
  elseif(KILN_CUDA STREQUAL "ON")
    message(FATAL_ERROR "KILN_CUDA=ON but no CUDA compiler (nvcc) was found; "
                        "set CMAKE_CUDA_COMPILER or use -DKILN_CUDA=OFF")
  else()
    message(STATUS "Kiln: nvcc not found, building without CUDA")
  endif()
endif()

if(KILN_WITH_CUDA)
  enable_language(CUDA)
  # CMake 3.25 does not know nvcc 12+'s C++20 flag; teach it.
  if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    list(APPEND CMAKE_CUDA_COMPILE_FEATURES cuda_std_20)
  endif()
  set(CMAKE_CUDA_STANDARD 20)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
  find_package(CUDAToolkit REQUIRED)

  include(${CMAKE_CURRENT_LIST_DIR}/KilnCudaLibs.cmake)
endif()
