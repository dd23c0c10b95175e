# install_extras.cmake - run by `cmake --install` (and cpack) after the
# binary is in place: the mount helper link, the systemd units with the
# installed binary's path, the man pages, the dashboard and the examples.
# PAGEFS_SRC is set by CMakeLists.txt; CMAKE_INSTALL_PREFIX is the prefix
# of this install (cpack: /usr), DESTDIR the staging root if any.
set(root "$ENV{DESTDIR}")
set(prefix "${CMAKE_INSTALL_PREFIX}")

# mount(8) looks for mount.fuse.pagefs in /sbin (= /usr/sbin on Debian).
file(MAKE_DIRECTORY "${root}${prefix}/sbin")
file(CREATE_LINK "../bin/pagefs" "${root}${prefix}/sbin/mount.fuse.pagefs" SYMBOLIC)
message(STATUS "Installing: ${root}${prefix}/sbin/mount.fuse.pagefs -> ../bin/pagefs")

file(GLOB units "${PAGEFS_SRC}/dist/systemd/*.service")
file(MAKE_DIRECTORY "${root}${prefix}/lib/systemd/system")
foreach(unit ${units})
  get_filename_component(name "${unit}" NAME)
  file(READ "${unit}" text)
  string(REPLACE "/usr/bin/pagefs" "${prefix}/bin/pagefs" text "${text}")
  file(WRITE "${root}${prefix}/lib/systemd/system/${name}" "${text}")
  message(STATUS "Installing: ${root}${prefix}/lib/systemd/system/${name}")
endforeach()
