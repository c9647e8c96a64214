# Sanitizer builds are whole-build settings so every object (including the
# header-only parts of abseil/toml++ instantiated in our code) is instrumented.
if(MERIDIAN_SANITIZE)
  if(MERIDIAN_SANITIZE STREQUAL "thread")
    set(_meridian_san_flags -fsanitize=thread)
  elseif(MERIDIAN_SANITIZE STREQUAL "address,undefined")
    set(_meridian_san_flags -fsanitize=address,undefined -fno-sanitize-recover=all)
  else()
    message(FATAL_ERROR "MERIDIAN_SANITIZE must be empty, 'address,undefined' or 'thread'; got '${MERIDIAN_SANITIZE}'")
  endif()
  add_compile_options(${_meridian_san_flags} -fno-omit-frame-pointer -g)
  if(MERIDIAN_SANITIZE STREQUAL "address,undefined")
    # Debug ASan builds compile at -O1, the level AddressSanitizer's documentation recommends:
    # the replay suites run several times faster than at -O0, and Debug keeps assert() on.
    # GCC 12 then reports -Wmaybe-uninitialized inside libstdc++'s <regex> under the
    # instrumentation (GCC PR 105562); the warning stays an error in every other build.
    add_compile_options($<$<CONFIG:Debug>:-O1>)
    if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
      add_compile_options($<$<CONFIG:Debug>:-Wno-maybe-uninitialized>)
    endif()
  endif()
  add_link_options(${_meridian_san_flags})
endif()
