# Compiler cache (docs/testing.md#build-caches, ADR-0021). With MERIDIAN_CCACHE=AUTO (the default)
# every C, C++ and CUDA compile goes through Debian's ccache when it is installed, so a second
# build tree (sanitizers, fuzzing, the Python wheel) or a fresh clone on the same machine reuses
# objects already compiled with the same flags. Results are keyed on paths relative to the source
# tree: CCACHE_BASEDIR rewrites absolute paths under it, and -fdebug-prefix-map makes the debug info
# (and so the object) independent of where the clone lives. A launcher the user set wins.
set(MERIDIAN_CCACHE
    "AUTO"
    CACHE STRING "Compile through ccache (ON, OFF or AUTO: when ccache is installed)")
set_property(CACHE MERIDIAN_CCACHE PROPERTY STRINGS AUTO ON OFF)

set(MERIDIAN_CCACHE_ENABLED OFF)
if(MERIDIAN_CCACHE STREQUAL "AUTO" OR MERIDIAN_CCACHE)
  find_program(MERIDIAN_CCACHE_PROGRAM ccache)
  if(MERIDIAN_CCACHE_PROGRAM)
    set(MERIDIAN_CCACHE_ENABLED ON)
  elseif(NOT MERIDIAN_CCACHE STREQUAL "AUTO")
    message(FATAL_ERROR "MERIDIAN_CCACHE=ON but ccache was not found (apt-get install ccache)")
  endif()
endif()

if(MERIDIAN_CCACHE_ENABLED)
  # The object does not depend on the clone's location, so neither should its key.
  add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:-fdebug-prefix-map=${PROJECT_SOURCE_DIR}=.>")
  set(_meridian_ccache env "CCACHE_BASEDIR=${PROJECT_SOURCE_DIR}" "${MERIDIAN_CCACHE_PROGRAM}")
  foreach(lang C CXX)
    if(NOT CMAKE_${lang}_COMPILER_LAUNCHER)
      set(CMAKE_${lang}_COMPILER_LAUNCHER ${_meridian_ccache})
    endif()
  endforeach()
  # nvcc has no prefix map for its device debug info: its key ignores the build directory instead.
  if(NOT CMAKE_CUDA_COMPILER_LAUNCHER)
    set(CMAKE_CUDA_COMPILER_LAUNCHER env "CCACHE_BASEDIR=${PROJECT_SOURCE_DIR}" CCACHE_NOHASHDIR=true
                                     "${MERIDIAN_CCACHE_PROGRAM}")
  endif()
endif()
