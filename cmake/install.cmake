# The installable library, included by CMakeLists.txt: libloom.so and libloom.a made from the
# library's objects (LOOM_OBJECTS, compiled with hidden visibility) so that both export only
# include/loom.h's LOOM_API functions, and what `cmake --install` puts beside them: loom.h, a
# pkg-config file (loom.pc) and a CMake package (find_package(loom) gives loom::loom).
# examples/ builds against that installed tree; scripts/check-install.sh checks all of it.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# libloom.so. The target is not called loom: the binary is. Before 1.0 a minor release may
# change the ABI, so the SONAME carries major.minor (libloom.so.0.1).
add_library(loom_shared SHARED ${LOOM_CPU_OBJECTS})
target_link_libraries(loom_shared PRIVATE loomobj)
set_target_properties(loom_shared PROPERTIES OUTPUT_NAME loom EXPORT_NAME loom VERSION ${PROJECT_VERSION}
                      SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR})
# Every library it calls must be among its dependencies, so a missing one fails this link rather
# than a user's. Not with sanitizers: clang links their run-times into executables only.
if(NOT LOOM_SANITIZE AND NOT LOOM_FUZZ)
  target_link_options(loom_shared PRIVATE LINKER:--no-undefined)
endif()

# libloom.a. An archive of the objects themselves would leave every internal function global,
# free to clash with a user's own `attention` or `linear`; so the objects are first linked into
# one (ld -r), inside which objcopy makes the hidden symbols local. loomcore keeps them global
# for the binary and the tests.
set(LOOM_STATIC_OBJECT ${CMAKE_CURRENT_BINARY_DIR}/libloom.o)
set(LOOM_STATIC ${CMAKE_CURRENT_BINARY_DIR}/libloom.a)
add_custom_command(OUTPUT ${LOOM_STATIC}
                   COMMAND ${CMAKE_LINKER} -r -o ${LOOM_STATIC_OBJECT} ${LOOM_OBJECTS}
                   COMMAND ${CMAKE_OBJCOPY} --localize-hidden ${LOOM_STATIC_OBJECT}
                   COMMAND ${CMAKE_AR} rcs ${LOOM_STATIC} ${LOOM_STATIC_OBJECT}
                   DEPENDS ${LOOM_OBJECTS}
                   COMMAND_EXPAND_LISTS VERBATIM
                   COMMENT "Linking C static library libloom.a (one object, only loom.h's functions global)")
add_custom_target(loom_static ALL DEPENDS ${LOOM_STATIC})
# DEPENDS on the objects' files reruns the command when one changes; their targets must also be
# named for them to be built first.
list(TRANSFORM LOOM_CPU_VARIANTS PREPEND loomcpu_ OUTPUT_VARIABLE LOOM_CPU_TARGETS)
add_dependencies(loom_static loomobj ${LOOM_CPU_TARGETS})

install(TARGETS loom_shared EXPORT loomTargets LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${LOOM_STATIC} DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES ${CMAKE_SOURCE_DIR}/include/loom.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

# The CMake package. loom::loom is the shared library, whose users need none of its
# dependencies to build, so the exported target is the whole config file.
set(LOOM_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/loom)
install(EXPORT loomTargets FILE loomConfig.cmake NAMESPACE loom:: DESTINATION ${LOOM_CMAKE_DIR})
# Before 1.0 only the same major.minor is compatible (as the SONAME says).
write_basic_package_version_file(loomConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/loomConfigVersion.cmake DESTINATION ${LOOM_CMAKE_DIR})

# The pkg-config file. Its prefix is found from its own place, so the tree may be installed with
# --prefix or DESTDIR, or moved. The private fields are what a static link (pkg-config --static)
# adds: the pkg-config modules CMakeLists.txt found, Open MPI's own (ompi-c), oneDNN, OpenMP's run-time.
file(RELATIVE_PATH LOOM_PC_PREFIX ${CMAKE_INSTALL_FULL_LIBDIR}/pkgconfig ${CMAKE_INSTALL_PREFIX})
string(REGEX REPLACE "/$" "" LOOM_PC_PREFIX "${LOOM_PC_PREFIX}")
set(LOOM_PC_REQUIRES ${BLAS_MODULE_NAME} ${PCRE2_MODULE_NAME} ${CJSON_MODULE_NAME} ${MHD_MODULE_NAME} ${XXHASH_MODULE_NAME}
    libjpeg libpng libwebp libwebpdemux)
set(LOOM_PC_LIBS ${OpenMP_C_FLAGS} -lpthread -lm)
if(LOOM_MPI)
  list(APPEND LOOM_PC_REQUIRES ompi-c)
endif()
if(LOOM_HWLOC)
  list(APPEND LOOM_PC_REQUIRES ${HWLOC_MODULE_NAME})
endif()
if(LOOM_DNNL)
  list(PREPEND LOOM_PC_LIBS -ldnnl)
endif()
list(JOIN LOOM_PC_REQUIRES " " LOOM_PC_REQUIRES)
list(JOIN LOOM_PC_LIBS " " LOOM_PC_LIBS)
configure_file(${CMAKE_SOURCE_DIR}/cmake/loom.pc.in loom.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/loom.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
