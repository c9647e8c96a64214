# libFuzzer build (MERIDIAN_BUILD_FUZZ=ON, docs/testing.md#fuzzing): every object
# is compiled with coverage instrumentation and ASan/UBSan so a finding anywhere
# in the libraries is caught; only the harnesses in fuzz/ link libFuzzer's main.
# Debian's clang ships libFuzzer (libclang-rt-14-dev); GCC has no equivalent.
if(MERIDIAN_BUILD_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "MERIDIAN_BUILD_FUZZ=ON needs clang (libFuzzer); configure with "
                        "CC=clang CXX=clang++ (got ${CMAKE_CXX_COMPILER_ID} ${CMAKE_CXX_COMPILER})")
  endif()
  if(MERIDIAN_SANITIZE)
    message(FATAL_ERROR "MERIDIAN_BUILD_FUZZ=ON sets its own sanitizers (address,undefined); "
                        "leave MERIDIAN_SANITIZE empty (got '${MERIDIAN_SANITIZE}')")
  endif()
  set(MERIDIAN_FUZZ_SANITIZERS address,undefined)
  add_compile_options(-fsanitize=fuzzer-no-link,${MERIDIAN_FUZZ_SANITIZERS} -fno-sanitize-recover=all
                      -fno-omit-frame-pointer -g)
  add_link_options(-fsanitize=${MERIDIAN_FUZZ_SANITIZERS})
endif()
