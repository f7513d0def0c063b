// precis::convert: bulk conversion is bit-identical to round_to element by element, for every
// length 0..67, unaligned starts, every mode and overflow choice, both directions.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "precis/tensor/gemm.hpp"
#include "test_support.hpp"

namespace {

using namespace fmt_test;
using precis::overflow;
using precis::rounding;

template <class T>
class ConvertBulk : public ::testing::Test {};
TYPED_TEST_SUITE(ConvertBulk, SmallFormats);

/// Source floats that exercise every branch: random patterns (NaN, inf, subnormals),
/// values around the target's extremes and its rounding boundaries.
template <class T>
std::vector<float> mixed_sources(std::size_t n) {
  const ref::value_table t(spec<T>::f);
  auto pts = structured_points<float>(t);
  const auto rnd = random_points<float>(t.f, n, 11);
  pts.insert(pts.end(), rnd.begin(), rnd.end());
  return pts;
}

TYPED_TEST(ConvertBulk, FloatToFormatMatchesScalarAtEveryLengthAndOffset) {
  using T = TypeParam;
  const auto src = mixed_sources<T>(4096);
  for (rounding mode : deterministic_modes()) {
    for (overflow ov : overflow_modes<T>()) {
      for (std::size_t offset : {0u, 1u, 3u}) {
        for (std::size_t len = 0; len <= 67; ++len) {
          const std::size_t start = (len * 131 + offset) % (src.size() - 80) + offset;
          std::vector<T> buf(len + offset + 1);
          std::span<T> dst(buf.data() + offset, len);
          precis::convert(std::span<const float>(src.data() + start, len), dst, mode, ov);
          for (std::size_t i = 0; i < len; ++i) {
            ASSERT_EQ(bits_of(dst[i]), bits_of(precis::round_to<T>(src[start + i], mode, ov)))
                << precis::to_string(mode) << " " << precis::to_string(ov) << " len " << len
                << " i " << i << " x " << std::hexfloat << src[start + i];
          }
        }
      }
      // And the whole array in one call (the long SIMD loop).
      std::vector<T> all(src.size());
      precis::convert(src, all, mode, ov);
      for (std::size_t i = 0; i < src.size(); ++i) {
        ASSERT_EQ(bits_of(all[i]), bits_of(precis::round_to<T>(src[i], mode, ov))) << std::hexfloat << src[i];
      }
    }
  }
}

TYPED_TEST(ConvertBulk, FormatToFloatMatchesScalarForEveryPattern) {
  using T = TypeParam;
  using bf = precis::detail::bit_format<T>;
  const ref::ref_format f = spec<T>::f;
  const std::uint64_t count = std::uint64_t{1} << std::min(1 + f.E + f.M, 20);
  std::vector<T> src(count + 5);
  for (std::uint64_t b = 0; b < src.size(); ++b) {
    src[b] = bf::from_bits(static_cast<typename bf::bits_type>((b * 0x9E3779B1u) & ((std::uint64_t{1} << (1 + f.E + f.M)) - 1)));
  }
  for (std::size_t offset : {0u, 1u, 5u}) {
    std::vector<float> dst(src.size() - offset);
    precis::convert(std::span<const T>(src.data() + offset, dst.size()), dst);
    for (std::size_t i = 0; i < dst.size(); ++i) {
      ASSERT_EQ(bits_of(dst[i]), bits_of(precis::round_to<float>(src[offset + i])))
          << "pattern 0x" << std::hex << bits_of(src[offset + i]);
    }
  }
}

#if PRECIS_X86_SIMD
/// Every 8-bit pattern through each x86 decode kernel directly (the dispatcher sends almost
/// everything to the widest one): in pattern order, so most 16-lane blocks hold no infinity or
/// NaN (the fp16 route) and some hold one in their last lane, and in a scattered order that puts
/// the special values in other lanes (the table route for that block).
template <class T>
void check_decode8_kernels() {
  using bf = precis::detail::bit_format<T>;
  constexpr auto lay = bf::lay;
  std::vector<std::uint8_t> src(512);
  for (std::size_t b = 0; b < 256; ++b) {
    src[b] = static_cast<std::uint8_t>(b);
    src[256 + b] = static_cast<std::uint8_t>((b * 167u + 13u) & 0xffu);  // 167 odd: every pattern once
  }
  std::vector<float> want(src.size());
  for (std::size_t i = 0; i < src.size(); ++i) want[i] = precis::round_to<float>(bf::from_bits(src[i]));
  const auto check = [&](const char* kernel, std::size_t done, const std::vector<float>& got) {
    ASSERT_EQ(done, src.size()) << kernel;
    for (std::size_t i = 0; i < src.size(); ++i) {
      ASSERT_EQ(bits_of(got[i]), bits_of(want[i])) << kernel << " pattern 0x" << std::hex << unsigned{src[i]};
    }
  };
  if (!precis::detail::cpu_has_avx2_f16c()) GTEST_SKIP() << "AVX2 and F16C are not available on this CPU (or OS, or PRECIS_ISA caps them)";
  std::vector<float> got(src.size());
  check("avx2", precis::detail::decode_to_float_avx2<lay>(src.data(), got.data(), src.size()), got);
  if (!precis::detail::cpu_has_avx512f()) GTEST_SKIP() << "AVX-512F is not available on this CPU (or OS, or PRECIS_ISA caps it)";
  std::fill(got.begin(), got.end(), 0.0f);
  check("avx512", precis::detail::decode8_to_float_avx512<lay>(src.data(), got.data(), src.size()), got);
}

TEST(Convert, EightBitDecodeKernelsMatchScalarForEveryPattern) {
  static_assert(precis::detail::decodes_via_half(precis::detail::bit_format<precis::float8_e4m3>::lay) &&
                precis::detail::decodes_via_half(precis::detail::bit_format<precis::float8_e5m2>::lay));
  check_decode8_kernels<precis::float8_e4m3>();
  check_decode8_kernels<precis::float8_e5m2>();
  check_decode8_kernels<precis::minifloat<3, 2>>();
}

/// float -> bf16 to nearest through each x86 kernel directly: the AVX2 and AVX-512 integer lanes
/// and AVX512-BF16's vcvtneps2bf16, whose blocks of 16 holding a subnormal (read as zero by the
/// instruction) go through the integer lanes. Sources: the structured and random points (NaNs,
/// infinities, subnormals, rounding ties), then blocks of normal values with one subnormal moved
/// through every lane, and blocks of normals only.
TEST(Convert, Bfloat16EncodeKernelsMatchScalar) {
  auto src = mixed_sources<precis::bfloat16>(4096);
  for (std::size_t lane = 0; lane < 16; ++lane) {
    for (std::size_t i = 0; i < 16; ++i) {
      const std::uint32_t normal = 0x3f800000u + static_cast<std::uint32_t>(i * 0x8001u + lane * 0x10000u);
      src.push_back(std::bit_cast<float>(i == lane ? 0x80000000u | (0x00418001u + static_cast<std::uint32_t>(lane)) : normal));
    }
  }
  for (std::uint32_t i = 0; i < 64; ++i) src.push_back(std::bit_cast<float>(0x3f7f8000u + i * 0x4000u));  // ties at 1
  src.resize(src.size() / 16 * 16);
  std::vector<std::uint16_t> want(src.size()), got(src.size());
  for (std::size_t i = 0; i < src.size(); ++i) want[i] = static_cast<std::uint16_t>(bits_of(precis::round_to<precis::bfloat16>(src[i])));
  const auto check = [&](const char* kernel, std::size_t done) {
    ASSERT_EQ(done, src.size()) << kernel;
    for (std::size_t i = 0; i < src.size(); ++i) {
      ASSERT_EQ(got[i], want[i]) << kernel << " x " << std::hexfloat << src[i] << " (bits 0x" << std::hex
                                 << std::bit_cast<std::uint32_t>(src[i]) << ")";
    }
  };
  if (!precis::detail::cpu_has_avx2_f16c()) GTEST_SKIP() << "AVX2 and F16C are not available on this CPU (or OS, or PRECIS_ISA caps them)";
  check("avx2", precis::detail::float_to_bf16_nearest_avx2(src.data(), got.data(), src.size()));
  if (!precis::detail::cpu_has_avx512f()) GTEST_SKIP() << "AVX-512F is not available on this CPU (or OS, or PRECIS_ISA caps it)";
  std::fill(got.begin(), got.end(), std::uint16_t{0});
  check("avx512", precis::detail::float_to_bf16_nearest_avx512(src.data(), got.data(), src.size()));
  if (!precis::detail::cpu_has_avx512_bf16()) GTEST_SKIP() << "AVX512-BF16 is not available on this CPU (or OS, or PRECIS_ISA caps it)";
  std::fill(got.begin(), got.end(), std::uint16_t{0});
  check("avx512_bf16", precis::detail::float_to_bf16_nearest_avx512_bf16(src.data(), got.data(), src.size()));
}
#endif

// bf16 has a bulk path of its own (16 random bits added, then truncated); fp16 the general one.
// Runs near 1 (every discarded fraction), then every kind of value: NaN, infinities,
// subnormals, the largest finite values (some round into infinity), zeros of both signs.
template <class T>
void check_stochastic_bulk() {
  std::vector<float> src(1000);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = 1.0f + static_cast<float>(i) * 0x1p-19f;
  const auto mixed = mixed_sources<T>(4096);
  src.insert(src.end(), mixed.begin(), mixed.end());
  for (const float v : {0x1.fffffep127f, -0x1.fffffep127f, 0x1.fe0002p127f, 0x1p-149f, -0x1.fffffcp-127f, 0.0f, -0.0f})
    src.insert(src.end(), 300, v);  // the same value many times: many draws each
  std::vector<T> bulk(src.size());
  precis::xoshiro256pp g1(5), g2(5);
  precis::convert(src, bulk, rounding::stochastic, g1);
  for (std::size_t i = 0; i < src.size(); ++i) {
    ASSERT_EQ(bits_of(bulk[i]), bits_of(precis::round_to<T>(src[i], rounding::stochastic, g2)))
        << "i " << i << " x " << std::hexfloat << src[i];
  }
  EXPECT_EQ(g1(), g2()) << "one draw per element";
}

TEST(Convert, StochasticBulkEqualsScalarDrawsInOrder) {
  check_stochastic_bulk<precis::bfloat16>();
  check_stochastic_bulk<precis::half>();
}

/// float -> an 8-bit layout to nearest even through the portable vectors (every CPU without the
/// x86-64 kernels) against round_to, for every float whose sign, exponent and 9 leading
/// fraction bits differ, each with its low 14 bits 0, 1, 0x2000 and 0x3fff: every combination of
/// kept bits, guard bit and sticky bits these layouts' roundings read (at most 3 kept bits, 4
/// more below the smallest normal), NaN payloads included, in every overflow mode the layout
/// takes.
template <class T>
void check_small_portable(std::vector<overflow> modes) {
#if !PRECIS_VECTOR_EXT
  (void)modes;
  GTEST_SKIP() << "this compiler has no vector extensions: the scalar path converts to 8-bit layouts";
#else
  constexpr precis::detail::layout lay = precis::detail::bit_format<T>::lay;
  std::vector<float> src;
  src.reserve(std::size_t{1} << 20);
  for (std::uint32_t top = 0; top < (1u << 18); ++top)
    for (std::uint32_t low : {0u, 1u, 0x2000u, 0x3fffu}) src.push_back(std::bit_cast<float>(top << 14 | low));
  std::vector<std::uint8_t> got(src.size());
  for (overflow ov : modes) {
    const auto pattern = static_cast<std::uint32_t>(ov == overflow::infinity   ? lay.inf_bits()
                                                    : ov == overflow::saturate ? lay.max_bits()
                                                                               : lay.nan_bits());
    precis::detail::float_to_small_nearest_portable<lay>(src.data(), got.data(), src.size(), pattern);
    std::size_t bad = 0;
    for (std::size_t i = 0; i < src.size(); ++i) {
      const auto want = bits_of(precis::round_to<T>(src[i], rounding::nearest_even, ov));
      if (got[i] != want && ++bad <= 3) {
        ADD_FAILURE() << precis::format_traits<T>::name << " " << precis::to_string(ov) << ": float 0x" << std::hex
                      << std::bit_cast<std::uint32_t>(src[i]) << " -> 0x" << unsigned{got[i]} << ", round_to 0x" << want;
      }
    }
    EXPECT_EQ(bad, 0u) << precis::format_traits<T>::name << " " << precis::to_string(ov);
  }
#endif
}

TEST(Convert, EightBitPortableEncodeMatchesScalarOnEveryDecidingPattern) {
  check_small_portable<precis::float8_e4m3>({overflow::saturate, overflow::nan});
  check_small_portable<precis::float8_e5m2>({overflow::saturate, overflow::infinity, overflow::nan});
  check_small_portable<precis::minifloat<3, 2>>({overflow::infinity, overflow::saturate});
  check_small_portable<precis::minifloat<2, 1, precis::encoding::fn>>({overflow::saturate});
}

TEST(Convert, DoubleAndCrossFormatPaths) {
  // double -> half and half -> bf16 (through the exact float decode) agree with round_to.
  std::vector<double> d(777);
  precis::xoshiro256pp gen(6);
  for (auto& x : d) x = std::ldexp(static_cast<double>(gen() >> 11), static_cast<int>(gen() % 60) - 80);
  std::vector<precis::half> h(d.size());
  precis::convert(d, h, rounding::upward);
  std::vector<precis::bfloat16> b(d.size());
  precis::convert(h, b, rounding::toward_zero);
  for (std::size_t i = 0; i < d.size(); ++i) {
    ASSERT_EQ(bits_of(h[i]), bits_of(precis::round_to<precis::half>(d[i], rounding::upward)));
    ASSERT_EQ(bits_of(b[i]), bits_of(precis::round_to<precis::bfloat16>(h[i], rounding::toward_zero)));
  }
}

TEST(Convert, ErrorsLeaveTheDestinationUntouched) {
  std::vector<float> src(10, 1.0f);
  std::vector<precis::half> dst(9, precis::half(2.0f));
  EXPECT_THROW(precis::convert(src, dst), precis::shape_error);
  try {
    precis::convert(src, dst);
  } catch (const precis::shape_error& e) {
    EXPECT_NE(std::string(e.what()).find("source has 10 elements, destination has 9"), std::string::npos);
  }
  std::vector<precis::half> ok(10, precis::half(2.0f));
  EXPECT_THROW(precis::convert(src, ok, rounding::stochastic), precis::invalid_argument);
  std::vector<precis::float8_e4m3> f8(10);
  EXPECT_THROW(precis::convert(src, f8, rounding::nearest_even, overflow::infinity), precis::invalid_argument);
  for (auto v : dst) EXPECT_EQ(static_cast<float>(v), 2.0f);
  for (auto v : ok) EXPECT_EQ(static_cast<float>(v), 2.0f);
  // Overlapping buffers are refused.
  std::vector<float> buf(16, 1.0f);
  EXPECT_THROW(precis::convert(std::span<const float>(buf.data(), 8),
                               std::span<float>(buf.data() + 4, 8)),
               precis::invalid_argument);
}

}  // namespace

// PRECIS_ISA caps every kernel's instruction set (ctest runs this binary again under
// PRECIS_ISA=avx512, =avx2 and =portable: the conversions above then take the lower paths and
// must give the same bits).
TEST(IsaCap, FollowsTheEnvironment) {
#if !PRECIS_X86_SIMD
  GTEST_SKIP() << "not an x86-64 build with its SIMD kernels: PRECIS_ISA caps those only";
#else
  const char* e = std::getenv("PRECIS_ISA");
  if (e == nullptr || std::string(e) == "all") GTEST_SKIP() << "PRECIS_ISA is not set: nothing is capped";
  const std::string cap(e);
  namespace d = precis::detail;
  EXPECT_FALSE(d::cpu_has_avx512_bf16()) << "PRECIS_ISA=" << cap;
  EXPECT_FALSE(d::cpu_has_avx512_fp16()) << "PRECIS_ISA=" << cap;
  if (cap == "avx512") {
    EXPECT_EQ(d::cpu_has_avx512f(), d::cpu_isa_level() >= 2) << "PRECIS_ISA=" << cap;
    EXPECT_LE(precis::gemm_isa_available(), precis::gemm_isa::avx512) << "PRECIS_ISA=" << cap;
    return;
  }
  EXPECT_FALSE(d::cpu_has_avx512f()) << "PRECIS_ISA=" << cap;
  EXPECT_LE(precis::gemm_isa_available(), precis::gemm_isa::avx2) << "PRECIS_ISA=" << cap;
  if (cap == "portable") {
    EXPECT_FALSE(d::cpu_has_avx2_f16c());
    EXPECT_EQ(precis::gemm_isa_available(), precis::gemm_isa::portable);
  }
#endif
}
