# Cross-compiling precis's tests and programs for aarch64 Linux on an x86-64 Debian machine, and
# running them under QEMU's user-mode emulation (docs/building.md, "aarch64 and other CPUs"):
#   apt-get install g++-aarch64-linux-gnu qemu-user
#   dpkg --add-architecture arm64 && apt-get update
#   apt-get install zlib1g-dev:arm64 libgtest-dev:arm64
#   cmake -S . -B build/aarch64 -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake \
#         -DCMAKE_BUILD_TYPE=Release -DPRECIS_BUILD_BENCHMARKS=OFF -DPRECIS_CUDA=OFF \
#         -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON
#   cmake --build build/aarch64 -j 2 && ctest --test-dir build/aarch64
# (Eigen and Boost are headers: the build machine's own packages serve.)
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu /usr/lib/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
# ctest (and gtest_discover_tests at build time) run the programs through QEMU
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64;-L;/usr/aarch64-linux-gnu)
