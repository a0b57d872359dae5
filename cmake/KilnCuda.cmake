# CUDA is optional: KILN_CUDA=AUTO turns it on when nvcc is found.
# Sets KILN_WITH_CUDA and, when on, the imported targets kiln::cudnn and kiln::nccl
# (cuDNN and NCCL ship no CMake config; they are found through CUDNN_ROOT / NCCL_ROOT
# hints as well as the toolkit directories).
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

  get_filename_component(_kiln_cuda_root "${CUDAToolkit_LIBRARY_DIR}" DIRECTORY)
  set(_kiln_hint_dirs ${CUDAToolkit_LIBRARY_ROOT} ${_kiln_cuda_root} /usr /usr/local)

  # NAME: a library name (cudnn); VERSIONED: the soname wheels ship without a dev symlink.
  function(kiln_find_cuda_lib target name versioned header root_var)
    set(_roots $ENV{${root_var}} ${${root_var}} ${_kiln_hint_dirs})
    find_path(${root_var}_INCLUDE_DIR ${header} HINTS ${_roots}
              PATH_SUFFIXES include targets/x86_64-linux/include)
    find_library(${root_var}_LIBRARY NAMES ${name} ${versioned} HINTS ${_roots}
                 PATH_SUFFIXES lib lib64 lib/x86_64-linux-gnu targets/x86_64-linux/lib)
    if(NOT ${root_var}_INCLUDE_DIR OR NOT ${root_var}_LIBRARY)
      message(FATAL_ERROR "Kiln: ${name} not found (header ${header}: '${${root_var}_INCLUDE_DIR}', "
                          "library: '${${root_var}_LIBRARY}'); set ${root_var} or use -DKILN_CUDA=OFF")
    endif()
    add_library(${target} UNKNOWN IMPORTED GLOBAL)
    set_target_properties(${target} PROPERTIES IMPORTED_LOCATION "${${root_var}_LIBRARY}"
                          INTERFACE_INCLUDE_DIRECTORIES "${${root_var}_INCLUDE_DIR}")
    message(STATUS "Kiln: ${name}: ${${root_var}_LIBRARY}")
  endfunction()

  kiln_find_cuda_lib(kiln::cudnn cudnn libcudnn.so.9 cudnn.h CUDNN_ROOT)
  kiln_find_cuda_lib(kiln::nccl nccl libnccl.so.2 nccl.h NCCL_ROOT)
endif()
