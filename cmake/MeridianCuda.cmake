# MERIDIAN_ENABLE_CUDA=AUTO turns CUDA on exactly when a CUDA compiler is found.
# meridian_core never depends on CUDA; kernels get their own target.
include(CheckLanguage)
set(MERIDIAN_CUDA_ENABLED OFF)
if(MERIDIAN_ENABLE_CUDA STREQUAL "AUTO" OR MERIDIAN_ENABLE_CUDA)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    # Ampere and Hopper (H100/H200) unless the user chose; nvcc's own default
    # would build for one old architecture only.
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 80 90)
    endif()
    enable_language(CUDA)
    # CMake 3.25 knows no C++20 dialect flag for nvcc (added in 3.26); the
    # C++20 targets that compile .cu files need one.
    if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
      set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
      set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    endif()
    find_package(CUDAToolkit REQUIRED)
    set(MERIDIAN_CUDA_ENABLED ON)
  elseif(NOT MERIDIAN_ENABLE_CUDA STREQUAL "AUTO")
    message(FATAL_ERROR "MERIDIAN_ENABLE_CUDA=ON but no CUDA compiler (nvcc) was found")
  endif()
endif()
