# The imported targets kiln::cudnn and kiln::nccl. cuDNN and NCCL ship no CMake config; they are
# found through CUDNN_ROOT / NCCL_ROOT hints and the CUDA toolkit's directories. Used by the build
# (KilnCuda.cmake) and by the installed KilnConfig.cmake, so an embedder finds them on its machine.
# Needs find_package(CUDAToolkit) first.
if(TARGET kiln::cudnn AND TARGET kiln::nccl)
  return()
endif()

get_filename_component(_kiln_cuda_root "${CUDAToolkit_LIBRARY_DIR}" DIRECTORY)
set(_kiln_hint_dirs ${CUDAToolkit_LIBRARY_ROOT} ${_kiln_cuda_root} /usr /usr/local)

# NAME: a library name (cudnn); VERSIONED: the soname wheels ship without a dev symlink.
function(kiln_find_cuda_lib target name versioned header root_var)
  if(TARGET ${target})
    return()
  endif()
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
