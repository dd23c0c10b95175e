# add_tests.cmake - one Criterion binary per unit test file, one helper.
#
#   pagefs_add_unit_test(NAME SRC [LIBS...])
#
# builds SRC into test_NAME linked with pagefs_meta, Criterion and any
# extra LIBS, and registers it with ctest under the label "unit". Every
# tests/unit/test_*.c is added automatically (NAME = file name without
# "test_" and ".c").
#
# Criterion forks a process per test, so LeakSanitizer is switched off for
# unit tests; the integration tests keep it for the real daemon.

find_package(PkgConfig REQUIRED)
pkg_check_modules(CRITERION IMPORTED_TARGET criterion)

file(MAKE_DIRECTORY ${CMAKE_BINARY_DIR}/unit-results)

function(pagefs_add_unit_test NAME SRC)
  if(NOT TARGET PkgConfig::CRITERION)
    message(WARNING "Criterion not found: unit test ${NAME} is not built "
                    "(install libcriterion-dev, or run scripts/deps.sh)")
    return()
  endif()
  add_executable(test_${NAME} ${SRC})
  target_link_libraries(test_${NAME} PRIVATE pagefs_meta PkgConfig::CRITERION ${ARGN})
  # --xml: per-test results for scripts/test.sh (ctest sees one test per binary).
  add_test(NAME unit_${NAME}
           COMMAND test_${NAME} --short-filename
                   --xml=${CMAKE_BINARY_DIR}/unit-results/${NAME}.xml
           WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
  set_tests_properties(unit_${NAME} PROPERTIES
                       LABELS unit
                       TIMEOUT 300
                       ENVIRONMENT "ASAN_OPTIONS=detect_leaks=0:abort_on_error=0;UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1")
endfunction()

file(GLOB PAGEFS_UNIT_TESTS CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/tests/unit/test_*.c)
foreach(src ${PAGEFS_UNIT_TESTS})
  get_filename_component(name ${src} NAME_WE)
  string(REGEX REPLACE "^test_" "" name ${name})
  pagefs_add_unit_test(${name} ${src})
endforeach()
# The HTTP protocol's tests call serve_request() (no socket).
if(TARGET test_serve)
  target_link_libraries(test_serve PRIVATE pagefs_serve)
endif()

# The integration suite (pytest, tests/integration/) against this build's
# binary; the tests read PAGEFS_BIN. Needs root or fusermount3 and /dev/fuse.
file(GLOB PAGEFS_INTEGRATION_TESTS CONFIGURE_DEPENDS
     ${PROJECT_SOURCE_DIR}/tests/integration/test_*.py)
if(PAGEFS_INTEGRATION_TESTS)
  add_test(NAME integration
           COMMAND /usr/bin/python3 -m pytest -q -p no:cacheprovider
                   ${PROJECT_SOURCE_DIR}/tests/integration
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(integration PROPERTIES
                       LABELS integration
                       TIMEOUT 900
                       ENVIRONMENT "PAGEFS_BIN=$<TARGET_FILE:pagefs>")
endif()
