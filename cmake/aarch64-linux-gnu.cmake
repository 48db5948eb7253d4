# CMake toolchain file: build for 64-bit ARM Linux (aarch64: Jetson Orin, Raspberry Pi 4/5,
# RK3588, Graviton) on an x86-64 Debian or Ubuntu host, with Debian's cross compiler
# (g++-aarch64-linux-gnu) and the arm64 libraries of its multiarch folders
# (dpkg --add-architecture arm64; libsleef-dev:arm64 ...). `make lite-aarch64` builds tdaot's lite
# runtime with it into build/aarch64/prefix; a robot service's own build uses it the same way:
#
#   cmake -S service -B build/service -DCMAKE_TOOLCHAIN_FILE=<tdaot>/cmake/aarch64-linux-gnu.cmake \
#         -DCMAKE_PREFIX_PATH=<tdaot>/build/aarch64/prefix
#
# What it builds runs on the board, or here under qemu-user (qemu-aarch64-static with
# QEMU_LD_PREFIX=/usr/aarch64-linux-gnu). It is not a sysroot of the robot's distribution:
# the glibc and libstdc++ symbol versions a binary needs are checked separately (docs/arm.md).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(TDAOT_AARCH64_TRIPLE aarch64-linux-gnu)
set(CMAKE_C_COMPILER ${TDAOT_AARCH64_TRIPLE}-gcc)
set(CMAKE_CXX_COMPILER ${TDAOT_AARCH64_TRIPLE}-g++)
set(CMAKE_LIBRARY_ARCHITECTURE ${TDAOT_AARCH64_TRIPLE})
# The toolchain's own libraries, then the multiarch folders of the host (/usr/lib/aarch64-linux-gnu,
# found through CMAKE_LIBRARY_ARCHITECTURE); programs are the host's.
set(CMAKE_FIND_ROOT_PATH /usr/${TDAOT_AARCH64_TRIPLE})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
# pkg-config reads the arm64 .pc files only (libsodium, minizip), never the host's.
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/${TDAOT_AARCH64_TRIPLE}/pkgconfig:/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_PATH} "")
# try_run and a test's executables run under qemu-user where it is installed.
find_program(TDAOT_QEMU_AARCH64 NAMES qemu-aarch64-static qemu-aarch64)
if(TDAOT_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR "${TDAOT_QEMU_AARCH64};-L;/usr/${TDAOT_AARCH64_TRIPLE}")
endif()
