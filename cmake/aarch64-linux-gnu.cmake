# Cross-build for 64-bit Arm Linux with Debian's cross compiler and arm64 multiarch libraries
# (LOOM_WITH_AARCH64=1 scripts/install-deps.sh installs them; scripts/test-aarch64.sh uses this):
#   cmake -S . -B build-aarch64 -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake \
#         -DLOOM_NATIVE=OFF -DLOOM_MPI=OFF -DLOOM_DNNL=OFF
# (-march=native means nothing to a cross compiler; Debian's arm64 Open MPI and oneDNN cannot
# be installed beside the amd64 ones, hence no MPI and GEMMs on OpenBLAS.)
# ctest runs the test binaries under qemu-aarch64 (CMAKE_CROSSCOMPILING_EMULATOR), and the
# tests run the loom binary under it too (LOOM_BIN in CMakeLists.txt), so binfmt_misc is not
# needed.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_ASM_COMPILER aarch64-linux-gnu-gcc)
# CMake takes CMAKE_LIBRARY_ARCHITECTURE (aarch64-linux-gnu, which CMakeLists.txt's
# openblas-openmp pkg-config path is built from) from this compiler.

# Libraries and headers come from the cross toolchain's own tree and from multiarch paths
# under /, never from x86-64 ones; programs (pkg-config) are the build machine's.
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu /)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# pkg-config reads only the arm64 .pc files (PKG_CONFIG_PATH, which CMakeLists.txt prepends
# the openblas-openmp folder to, is still searched first).
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig")

# The arm64 programs run on libc6:arm64 (/lib/ld-linux-aarch64.so.1 and
# /lib/aarch64-linux-gnu, which the multiarch -dev packages install). No `-L
# /usr/aarch64-linux-gnu`: that would pair the cross toolchain's ld.so (libc6-arm64-cross,
# another glibc build) with libc6:arm64's libc.so.6, and threaded programs then hang.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64)
