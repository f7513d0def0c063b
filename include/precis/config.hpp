// precis: configuration macros shared by every header.
#pragma once

#define PRECIS_VERSION_MAJOR 0
#define PRECIS_VERSION_MINOR 1
#define PRECIS_VERSION_PATCH 0

// x86-64 SIMD kernels are compiled with per-function target attributes and chosen at run
// time, so a consumer that builds without -march flags still gets them. They need GCC or
// Clang (target attributes); other compilers use the portable paths, which give
// bit-identical results.
#if (defined(__x86_64__) || defined(_M_X64)) && (defined(__GNUC__) || defined(__clang__)) && \
    !defined(PRECIS_NO_SIMD)
#define PRECIS_X86_SIMD 1
#else
#define PRECIS_X86_SIMD 0
#endif

#if defined(__CUDACC__)
#define PRECIS_HOST_DEVICE __host__ __device__
#else
#define PRECIS_HOST_DEVICE
#endif
