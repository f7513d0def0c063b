// precis: configuration macros shared by every header.
#pragma once

#define PRECIS_VERSION_MAJOR 0
#define PRECIS_VERSION_MINOR 1
#define PRECIS_VERSION_PATCH 0

// x86-64 SIMD kernels are compiled with per-function target attributes and chosen at run
// time, so a consumer that builds without -march flags still gets them. They need GCC or
// Clang (target attributes); other compilers, other architectures and PRECIS_NO_SIMD use the
// portable paths: the same bits from the conversions, and from the GEMM sums in other K blocks
// (docs/tensors.md).
#if (defined(__x86_64__) || defined(_M_X64)) && (defined(__GNUC__) || defined(__clang__)) && \
    !defined(PRECIS_NO_SIMD)
#define PRECIS_X86_SIMD 1
#else
#define PRECIS_X86_SIMD 0
#endif

// GCC's and Clang's vector extensions (vector_size, __builtin_convertvector): the portable
// kernels' 16-byte vectors (the GEMM's tile, the fp16 and bf16 conversions), which compile to
// SSE2 on x86-64 and Advanced SIMD on aarch64. Other compilers take those kernels' scalar forms.
#if defined(__GNUC__) || defined(__clang__)
#define PRECIS_VECTOR_EXT 1
#else
#define PRECIS_VECTOR_EXT 0
#endif

// aarch64's Advanced SIMD through <arm_neon.h> (every aarch64 CPU has it): fp16 conversions
// (format/convert_portable.hpp), the vectorized exp (tensor/detail/vexp.hpp), and the fp16 GEMM
// tile where the CPU has FEAT_FP16 (tensor/gemm/kernel_neon_fp16.hpp).
#if defined(__aarch64__) && defined(__ARM_NEON) && PRECIS_VECTOR_EXT
#define PRECIS_AARCH64_NEON 1
#else
#define PRECIS_AARCH64_NEON 0
#endif

// A loop whose iterations are independent, told to GCC's vectorizer (Clang's equivalent warns
// wherever a loop cannot be vectorized, as with multiprecision types, so it is left out).
#if defined(__GNUC__) && !defined(__clang__)
#define PRECIS_IVDEP _Pragma("GCC ivdep")
#else
#define PRECIS_IVDEP
#endif

// The next loop unrolled n times (GCC and Clang both read "GCC unroll"; n a literal). nvcc's
// front end does not know that pragma and would warn (#1675-D) in every translation unit that
// includes a kernel header, though it passes the pragma on to the host compiler: the warning is
// silenced around each use only.
#define PRECIS_PRAGMA(x) _Pragma(#x)
#if defined(__NVCC__)
#define PRECIS_UNROLL(n)                                                                        \
  PRECIS_PRAGMA(nv_diagnostic push) PRECIS_PRAGMA(nv_diag_suppress 1675) PRECIS_PRAGMA(GCC unroll n) \
      PRECIS_PRAGMA(nv_diagnostic pop)
#elif defined(__GNUC__) || defined(__clang__)
#define PRECIS_UNROLL(n) PRECIS_PRAGMA(GCC unroll n)
#else
#define PRECIS_UNROLL(n)
#endif

// A function compiled once for any arguments: not inlined, cloned or specialised for a caller's
// constants (GCC's noipa). With a caller's constant shapes propagated into the panel packing,
// GCC 12 warns (-Waggressive-loop-optimizations) about a loop that never runs.
#if defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__)
#define PRECIS_OPAQUE __attribute__((noipa))
#else
#define PRECIS_OPAQUE __attribute__((noinline))
#endif

#if defined(__CUDACC__)
#define PRECIS_HOST_DEVICE __host__ __device__
#else
#define PRECIS_HOST_DEVICE
#endif

namespace precis::detail {

// Library-defined remove_cv / remove_const / remove_cvref for use in signatures. GCC 13's
// libstdc++ defines the std ones through built-in traits; nvcc's front end writes them out
// into the host code it generates, where GCC 13 rejects them ("use of built-in trait
// '__remove_cv(float)' in function signature").
template <class T> struct remove_const { using type = T; };
template <class T> struct remove_const<const T> { using type = T; };
template <class T> using remove_const_t = typename remove_const<T>::type;

template <class T> struct remove_cv { using type = T; };
template <class T> struct remove_cv<const T> { using type = T; };
template <class T> struct remove_cv<volatile T> { using type = T; };
template <class T> struct remove_cv<const volatile T> { using type = T; };
template <class T> using remove_cv_t = typename remove_cv<T>::type;

template <class T> struct remove_cvref : remove_cv<T> {};
template <class T> struct remove_cvref<T&> : remove_cv<T> {};
template <class T> struct remove_cvref<T&&> : remove_cv<T> {};
template <class T> using remove_cvref_t = typename remove_cvref<T>::type;

}  // namespace precis::detail
