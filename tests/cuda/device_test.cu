// Device tensors and conversions (include/precis/cuda/device.cuh). Without --device (label
// `cuda`, runs in CI without a GPU): new host tensors are zero in every format on reused memory
// (compiled by nvcc), and with no device, allocating is a cuda_error that names cudaMalloc. With --device (label `gpu`; exit 77, skipped, without a device): copies round-trip,
// shape mismatches are named, and every fp16 and bf16 pattern widened, plus 2^20 fp32 values
// (every binade, subnormals, overflow, specials) narrowed, give the host precis::convert's bits.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <precis/cuda/device.cuh>
#include <precis/precis.hpp>
#include <string>
#include <vector>

#include "support.cuh"

namespace {

using cuda_test::bits_of;
using cuda_test::failures;
using cuda_test::check;

template <class T>
bool same(T a, T b) {
  const float fa = static_cast<float>(a), fb = static_cast<float>(b);
  if (std::isnan(fa) || std::isnan(fb)) return std::isnan(fa) && std::isnan(fb);
  return bits_of(a) == bits_of(b);
}

/// Device conversion src -> To against the host's, element by element.
template <class To, class From>
int mismatches(const precis::Tensor<From>& src) {
  auto d = precis::cuda::DeviceTensor<From>::from_host(src);
  precis::cuda::DeviceTensor<To> out(src.shape());
  precis::cuda::convert(d, out);
  const auto got = out.to_host();
  precis::Tensor<To> want(src.shape());
  precis::convert(std::span<const From>(src.data(), static_cast<std::size_t>(src.size())),
                  std::span<To>(want.data(), static_cast<std::size_t>(want.size())));
  int bad = 0;
  for (precis::index_t i = 0; i < src.size(); ++i) bad += !same(got.data()[i], want.data()[i]);
  return bad;
}

/// A new host Tensor is zero in every format (dirty_aligned_new.cpp hands this program its
/// over-aligned memory filled with 0xA5, as memory freed earlier may be). Eigen::half's default constructor sets no bits
/// where nvcc compiles it, so value-initialized halves held the memory's old bytes in .cu
/// programs: a 16-true optimizer's second moments started as garbage there.
template <class T>
void new_tensors_are_zero(const char* name) {
  for (const precis::index_t n : {1, 3, 64, 1000}) {
    const precis::Tensor<T> t(precis::Shape{n});
    int nonzero = 0;
    for (precis::index_t i = 0; i < n; ++i) {
      unsigned char b[sizeof(T)];
      std::memcpy(b, &t.data()[i], sizeof(T));
      for (unsigned char c : b) nonzero += c != 0;
    }
    check(nonzero == 0, std::string("Tensor<") + name + ">(Shape{" + std::to_string(n) + "}) has " + std::to_string(nonzero) +
                            " nonzero bytes on reused memory");
  }
}

int run_host() {
  new_tensors_are_zero<precis::half>("half");
  new_tensors_are_zero<precis::bfloat16>("bfloat16");
  new_tensors_are_zero<precis::float8_e4m3>("float8_e4m3");
  new_tensors_are_zero<float>("float");
  new_tensors_are_zero<double>("double");
  std::printf("%s\n", failures == 0 ? "new host tensors are zero on reused memory" : "failed");
  if (precis::cuda::device_count() > 0) {
    std::printf("a CUDA device is present: the no-device error path is not exercised here\n");
    return 0;
  }
  try {
    precis::cuda::DeviceTensor<float> t(precis::Shape{4});
    check(false, "allocating without a device did not throw");
  } catch (const precis::cuda::cuda_error& e) {
    check(std::string(e.what()).find("cudaMalloc of 16 bytes") != std::string::npos, std::string("message: ") + e.what());
  }
  std::printf("%s\n", failures == 0 ? "no device: allocation is a named cuda_error" : "failed");
  return failures == 0 ? 0 : 1;
}

int run_device() {
  if (precis::cuda::device_count() == 0) {
    std::printf("no CUDA device: skipped\n");
    return 77;
  }
  using precis::bfloat16;
  using precis::half;
  using precis::Shape;
  using precis::Tensor;
  // round trip
  Tensor<float> x(Shape{3, 5});
  for (precis::index_t i = 0; i < x.size(); ++i) x.data()[i] = 0.1f * static_cast<float>(i) - 0.7f;
  const auto back = precis::cuda::DeviceTensor<float>::from_host(x).to_host();
  check(std::memcmp(back.data(), x.data(), sizeof(float) * 15) == 0, "host -> device -> host");
  try {
    precis::cuda::DeviceTensor<float> d(Shape{5, 3});
    d.copy_from(x);
    check(false, "copy_from [3, 5] into [5, 3] did not throw");
  } catch (const precis::shape_error& e) {
    check(std::string(e.what()).find("[3, 5]") != std::string::npos, std::string("message: ") + e.what());
  }
  // every 16-bit pattern widened
  Tensor<half> hp(Shape{65536});
  Tensor<bfloat16> bp(Shape{65536});
  for (int i = 0; i < 65536; ++i) {
    const auto u = static_cast<std::uint16_t>(i);
    std::memcpy(hp.data() + i, &u, 2);
    std::memcpy(bp.data() + i, &u, 2);
  }
  check(mismatches<float>(hp) == 0, "fp16 -> fp32, every pattern");
  check(mismatches<float>(bp) == 0, "bf16 -> fp32, every pattern");
  check(mismatches<bfloat16>(hp) == 0, "fp16 -> bf16, every pattern");
  check(mismatches<half>(bp) == 0, "bf16 -> fp16, every pattern");
  // fp32 values over every binade, both signs, narrowed
  Tensor<float> f(Shape{1 << 20});
  precis::fill_log_uniform(f, -149, 128, 3, true);
  const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 65504.0f, 65520.0f, 65519.99f, 5.9604645e-8f, 2.9802322e-8f,
                            1.0f + 0x1p-11f, 1.0f + 0x1p-8f, 3.4028235e38f};
  for (std::size_t i = 0; i < sizeof(specials) / sizeof(float); ++i) f.data()[i] = specials[i];
  check(mismatches<half>(f) == 0, "fp32 -> fp16, 2^20 values");
  check(mismatches<bfloat16>(f) == 0, "fp32 -> bf16, 2^20 values");
  std::printf("%s\n", failures == 0 ? "device tensors and conversions: all match the host" : "failed");
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc > 1 && std::strcmp(argv[1], "--device") == 0) return run_device();
    return run_host();
  } catch (const precis::error& e) {
    std::printf("FAILED: %s\n", e.what());
    return 1;
  }
}
