// ctest runs format_tests and tensor_tests again with PRECIS_ISA=avx512, avx2 and portable, so
// that a machine with AVX512-BF16 or AVX512-FP16 also runs the AVX-512F paths a Skylake-SP
// takes, one with AVX-512 the AVX2 paths, and one with AVX2 the portable ones. Where the cap
// removes nothing (PRECIS_ISA=avx2 on a CPU without AVX-512, avx512 on one without AVX512-BF16
// and AVX512-FP16), the rerun would take the same paths as the run without the cap, test for
// test: this skips it, saying why (ctest reports it as skipped by that message).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "precis/config.hpp"
#if PRECIS_X86_SIMD
#include "precis/format/convert_x86.hpp"
#endif
#include "precis/tensor/gemm/kernel_neon_fp16.hpp"

namespace {

class IsaRerun : public ::testing::Environment {
 public:
  void SetUp() override {
    const char* e = std::getenv("PRECIS_ISA");
    if (e == nullptr) return;
    const std::string cap(e);
    // other values (all, or a bad one, whose error a test checks) run as they are
    const int level = cap == "avx512" ? 2 : cap == "avx2" ? 1 : cap == "portable" ? 0 : -1;
    if (level >= 0 && machine_level() <= level) {
      GTEST_SKIP() << "PRECIS_ISA=" << cap << " caps nothing on this machine (its level is "
                   << machine_level()
                   << "; 3 = AVX-512F with AVX512-BF16 or AVX512-FP16, 2 = AVX-512F, 1 = AVX2, 0 = "
                      "portable code only; on aarch64, 1 = FEAT_FP16's native fp16 tile): the run "
                      "without the cap took these paths";
    }
  }

 private:
  static int machine_level() {
#if PRECIS_X86_SIMD
    namespace d = precis::detail;
    return d::cpu_avx512_bf16_present() || d::cpu_avx512_fp16_present() ? 3 : d::cpu_isa_level();
#elif PRECIS_NEON_FP16_KERNEL
    return precis::detail::cpu_neon_fp16_present() ? 1 : 0;  // PRECIS_ISA=portable leaves out its fp16 tile
#else
    return 0;  // not x86, or PRECIS_NO_SIMD: portable code only
#endif
  }
};

const auto* const isa_rerun = ::testing::AddGlobalTestEnvironment(new IsaRerun);

}  // namespace
