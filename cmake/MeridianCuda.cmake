# MERIDIAN_ENABLE_CUDA=AUTO turns CUDA on exactly when a CUDA compiler is found.
# meridian_core never depends on CUDA; kernels get their own target.
include(CheckLanguage)
set(MERIDIAN_CUDA_ENABLED OFF)
if(MERIDIAN_ENABLE_CUDA STREQUAL "AUTO" OR MERIDIAN_ENABLE_CUDA)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    enable_language(CUDA)
    set(MERIDIAN_CUDA_ENABLED ON)
  elseif(NOT MERIDIAN_ENABLE_CUDA STREQUAL "AUTO")
    message(FATAL_ERROR "MERIDIAN_ENABLE_CUDA=ON but no CUDA compiler (nvcc) was found")
  endif()
endif()
