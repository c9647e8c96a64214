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
  add_link_options(${_meridian_san_flags})
endif()
