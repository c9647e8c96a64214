# meridian_blake3: the official BLAKE3 C implementation, built from the sources
# Debian ships in librust-blake3-dev (/usr/share/cargo/registry/blake3-<ver>/c).
# On x86-64 the SSE2/SSE4.1/AVX2/AVX-512 assembly is assembled and
# blake3_dispatch.c picks the widest the CPU has at run time; elsewhere the
# portable C (plus NEON on aarch64). Static and position-independent: the
# Python module links it. Only meridian_mrdn links it (PRIVATE).
if(TARGET meridian_blake3)
  return()
endif()

file(GLOB _meridian_blake3_dirs LIST_DIRECTORIES true "/usr/share/cargo/registry/blake3-*/c")
list(SORT _meridian_blake3_dirs COMPARE NATURAL ORDER DESCENDING)
set(MERIDIAN_BLAKE3_DIR
    ""
    CACHE PATH "Directory of the BLAKE3 C sources (blake3.h); found under /usr/share/cargo/registry if empty")
if(NOT MERIDIAN_BLAKE3_DIR)
  foreach(_dir IN LISTS _meridian_blake3_dirs)
    if(EXISTS "${_dir}/blake3.h" AND EXISTS "${_dir}/blake3_dispatch.c")
      set(_meridian_blake3_found "${_dir}")
      break()
    endif()
  endforeach()
else()
  set(_meridian_blake3_found "${MERIDIAN_BLAKE3_DIR}")
endif()
if(NOT _meridian_blake3_found OR NOT EXISTS "${_meridian_blake3_found}/blake3.h")
  message(FATAL_ERROR "BLAKE3 C sources not found under /usr/share/cargo/registry/blake3-*/c: "
                      "apt-get install librust-blake3-dev (or set MERIDIAN_BLAKE3_DIR)")
endif()
set(_b3 "${_meridian_blake3_found}")
message(STATUS "BLAKE3 C sources: ${_b3}")

add_library(meridian_blake3 STATIC "${_b3}/blake3.c" "${_b3}/blake3_dispatch.c" "${_b3}/blake3_portable.c")
add_library(meridian::blake3 ALIAS meridian_blake3)
set_target_properties(meridian_blake3 PROPERTIES POSITION_INDEPENDENT_CODE ON C_STANDARD 99 C_STANDARD_REQUIRED ON)
target_include_directories(meridian_blake3 PUBLIC $<BUILD_INTERFACE:${_b3}>)

if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$" AND NOT WIN32)
  set(_b3_asm "${_b3}/blake3_sse2_x86-64_unix.S" "${_b3}/blake3_sse41_x86-64_unix.S"
              "${_b3}/blake3_avx2_x86-64_unix.S" "${_b3}/blake3_avx512_x86-64_unix.S")
  target_sources(meridian_blake3 PRIVATE ${_b3_asm})
  set_source_files_properties(${_b3_asm} PROPERTIES LANGUAGE ASM)
elseif(CMAKE_SYSTEM_PROCESSOR MATCHES "^(aarch64|arm64|ARM64)$")
  target_sources(meridian_blake3 PRIVATE "${_b3}/blake3_neon.c")
  target_compile_definitions(meridian_blake3 PRIVATE BLAKE3_USE_NEON=1 BLAKE3_NO_SSE2 BLAKE3_NO_SSE41 BLAKE3_NO_AVX2
                                                     BLAKE3_NO_AVX512)
else()
  target_compile_definitions(meridian_blake3 PRIVATE BLAKE3_NO_SSE2 BLAKE3_NO_SSE41 BLAKE3_NO_AVX2 BLAKE3_NO_AVX512)
endif()
