# Packaging: the shared library libkiln.so beside libkiln.a, and what `cmake --install` (or
# `make install DESTDIR=...`) puts in place in a Debian-style layout (GNUInstallDirs): headers,
# both libraries, the kiln command line, a pkg-config file kiln.pc and a CMake package
# (find_package(kiln) -> kiln::kiln, the shared library, and kiln::kiln_static).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# Only the public API (every function kiln.h declares) leaves libkiln.so: a version script
# made from the header at configure time, so a function added to kiln.h is exported with no
# further edit; kiln's internals and the generated onnx__* protobuf code stay local.
set(KILN_PUBLIC_HEADER ${CMAKE_SOURCE_DIR}/include/kiln/kiln.h)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${KILN_PUBLIC_HEADER})
file(READ ${KILN_PUBLIC_HEADER} kiln_header)
string(REGEX MATCHALL "[ *]kiln_[a-z0-9_]+\\(" kiln_decls "${kiln_header}")
set(kiln_exports "")
foreach(d ${kiln_decls})
  string(REGEX REPLACE "^[ *](kiln_[a-z0-9_]+)\\($" "\\1" name "${d}")
  list(APPEND kiln_exports ${name})
endforeach()
list(REMOVE_DUPLICATES kiln_exports)
list(JOIN kiln_exports ";\n    " kiln_exports)
set(KILN_VERSION_SCRIPT ${CMAKE_BINARY_DIR}/kiln.map)
file(CONFIGURE OUTPUT ${KILN_VERSION_SCRIPT}
     CONTENT "KILN_0 {\n  global:\n    ${kiln_exports};\n  local: *;\n};\n")

# libkiln.so holds every object of libkiln.a (built once, position-independent).
file(CONFIGURE OUTPUT ${CMAKE_BINARY_DIR}/kiln_shared.c
     CONTENT "/* libkiln.so: the objects of libkiln.a, linked whole. */\ntypedef int kiln_shared_unit;\n")
add_library(kiln_shared SHARED ${CMAKE_BINARY_DIR}/kiln_shared.c)
target_link_libraries(kiln_shared PRIVATE "$<LINK_LIBRARY:WHOLE_ARCHIVE,kiln>"
                      PUBLIC ${PROTOBUF_C_LIB} Threads::Threads m ${CMAKE_DL_LIBS})
target_include_directories(kiln_shared PUBLIC
  $<BUILD_INTERFACE:${CMAKE_SOURCE_DIR}/include> $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
target_link_options(kiln_shared PRIVATE -Wl,--version-script=${KILN_VERSION_SCRIPT}
                    $<$<NOT:$<BOOL:${KILN_SANITIZE}>>:-Wl,--no-undefined>)
set_target_properties(kiln_shared PROPERTIES OUTPUT_NAME kiln EXPORT_NAME kiln
  VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR}
  LINK_DEPENDS ${KILN_VERSION_SCRIPT})
set_target_properties(kiln PROPERTIES EXPORT_NAME kiln_static)

install(TARGETS kiln kiln_shared EXPORT kilnTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} NAMELINK_COMPONENT Development
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS kiln_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(FILES ${CMAKE_SOURCE_DIR}/include/kiln/kiln.h ${CMAKE_SOURCE_DIR}/include/kiln/kiln_op.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kiln)

set(KILN_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/kiln)
install(EXPORT kilnTargets NAMESPACE kiln:: DESTINATION ${KILN_CMAKE_DIR})
configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/kilnConfig.cmake.in
  ${CMAKE_BINARY_DIR}/kilnConfig.cmake INSTALL_DESTINATION ${KILN_CMAKE_DIR})
write_basic_package_version_file(${CMAKE_BINARY_DIR}/kilnConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_BINARY_DIR}/kilnConfig.cmake ${CMAKE_BINARY_DIR}/kilnConfigVersion.cmake
        DESTINATION ${KILN_CMAKE_DIR})

# kiln.pc finds its prefix from its own place (${pcfiledir}), so the tree can be moved or
# staged under DESTDIR and still be used as it is.
file(RELATIVE_PATH KILN_PC_TO_PREFIX /${CMAKE_INSTALL_LIBDIR}/pkgconfig /)
configure_file(${CMAKE_SOURCE_DIR}/cmake/kiln.pc.in ${CMAKE_BINARY_DIR}/kiln.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/kiln.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
