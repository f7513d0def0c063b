// Checks precis's tensor-core model against inner products recorded on a GPU.
//
//   tc_validate ARCH FORMAT A B C D [--zero-c]
//
// ARCH is sm70, sm80, sm90 or sm90_wmma (Hopper through the WMMA API, whose tf32 runs as k4
// instructions); FORMAT fp16, bf16, tf32, e4m3 or e5m2 (as the architecture takes
// them). The four text files hold one inner product per line, d = c + sum_k a_k b_k:
//   A, B  the elements of a and b as fp32 bit patterns in hexadecimal ("3f800000"), separated by
//         spaces, the same number on every line; each must be a value of FORMAT (tf32 inputs may
//         carry fp32's low 13 bits, which the tensor core ignores: they are dropped);
//   C, D  c and the recorded output d, one fp32 bit pattern per line, in hexadecimal or as 32
//         binary digits.
// This is the layout of the validation data Khattak & Mikaitis published with their models of
// NVIDIA tensor cores. A line shorter than the instruction's K is padded with zero products;
// --zero-c takes c = 0 (recordings of D = A B with a zero accumulator). Prints the mismatches
// (the first few in full) and how many outputs differ from the correctly rounded fp32 sum;
// exits 0 when every output matches, 1 when some do not, 2 on bad arguments or files.
#include <bit>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <precis/precis.hpp>
#include <precis/tc/tensor_core.hpp>

namespace {

using precis::invalid_argument;

std::uint32_t parse_word(const std::string& w, const std::string& file, std::size_t line) {
  const bool binary = w.size() == 32 && w.find_first_not_of("01") == std::string::npos;
  const bool hex = !w.empty() && w.size() <= 8 && w.find_first_not_of("0123456789abcdefABCDEF") == std::string::npos;
  if (!binary && !hex) {
    throw invalid_argument("tc_validate: " + file + " line " + std::to_string(line) + ": \"" + w +
                           "\" is not an fp32 bit pattern (expected up to 8 hexadecimal digits or 32 binary digits)");
  }
  return static_cast<std::uint32_t>(std::stoul(w, nullptr, binary ? 2 : 16));
}

/// Every line of a file as fp32 bit patterns; blank lines are skipped.
std::vector<std::vector<std::uint32_t>> read_words(const std::string& file) {
  std::ifstream in(file);
  if (!in) throw invalid_argument("tc_validate: cannot open " + file);
  std::vector<std::vector<std::uint32_t>> rows;
  std::string text, w;
  for (std::size_t line = 1; std::getline(in, text); ++line) {
    std::istringstream words(text);
    std::vector<std::uint32_t> row;
    while (words >> w) row.push_back(parse_word(w, file, line));
    if (!row.empty()) rows.push_back(std::move(row));
  }
  if (rows.empty()) throw invalid_argument("tc_validate: " + file + " holds no values");
  return rows;
}

/// One value per line (c and d).
std::vector<std::uint32_t> read_column(const std::string& file) {
  std::vector<std::uint32_t> out;
  for (const auto& row : read_words(file)) {
    if (row.size() != 1) throw invalid_argument("tc_validate: " + file + ": expected one value per line, found a line with " + std::to_string(row.size()));
    out.push_back(row[0]);
  }
  return out;
}

template <class Arch, class In>
int check(const std::string& fa, const std::string& fb, const std::string& fc, const std::string& fd, bool zero_c) {
  const auto a = read_words(fa), b = read_words(fb);
  const auto c = read_column(fc), d = read_column(fd);
  const std::size_t n = a.size();
  if (b.size() != n || c.size() != n || d.size() != n) {
    throw invalid_argument("tc_validate: the files hold " + std::to_string(n) + ", " + std::to_string(b.size()) + ", " +
                           std::to_string(c.size()) + " and " + std::to_string(d.size()) +
                           " lines (A, B, C, D); expected the same number");
  }
  const std::size_t len = a[0].size();
  constexpr auto k = static_cast<std::size_t>(precis::tc::block_fma<Arch, In>::k);
  const std::size_t padded = (len + k - 1) / k * k;
  long mismatches = 0, non_ieee = 0;
  std::vector<In> x(padded), y(padded);
  for (std::size_t i = 0; i < n; ++i) {
    if (a[i].size() != len || b[i].size() != len) {
      throw invalid_argument("tc_validate: line " + std::to_string(i + 1) + " of A or B has " +
                             std::to_string(a[i].size()) + " and " + std::to_string(b[i].size()) +
                             " elements; expected " + std::to_string(len) + " as on the first line");
    }
    long double exact = 0;
    for (std::size_t j = 0; j < padded; ++j) {
      std::uint32_t wa = j < len ? a[i][j] : 0, wb = j < len ? b[i][j] : 0;
      if constexpr (std::is_same_v<In, precis::tf32>) {
        wa &= ~0x1fffu;
        wb &= ~0x1fffu;
      }
      const float va = std::bit_cast<float>(wa), vb = std::bit_cast<float>(wb);
      x[j] = In(va);
      y[j] = In(vb);
      if (!(static_cast<float>(x[j]) == va || va != va) || !(static_cast<float>(y[j]) == vb || vb != vb)) {
        throw invalid_argument("tc_validate: line " + std::to_string(i + 1) + " element " + std::to_string(j + 1) +
                               " is not a value of " + std::string(precis::format_traits<In>::name));
      }
      exact += static_cast<long double>(va) * static_cast<long double>(vb);
    }
    const float ci = zero_c ? 0.0f : std::bit_cast<float>(c[i]);
    exact += ci;
    const float got = precis::tc::inner_product<Arch, In>(ci, std::span<const In>(x), std::span<const In>(y));
    const std::uint32_t want = d[i];
    if (std::bit_cast<std::uint32_t>(got) != want && ++mismatches <= 5) {
      std::printf("line %zu: model %a (%08x), recorded %a (%08x)\n", i + 1, static_cast<double>(got),
                  std::bit_cast<std::uint32_t>(got), static_cast<double>(std::bit_cast<float>(want)), want);
    }
    non_ieee += static_cast<float>(exact) != std::bit_cast<float>(want);
  }
  std::printf("%s %s, K = %zu (instruction K = %zu): %ld mismatches in %zu outputs; %ld outputs (%.1f%%) differ from "
              "the correctly rounded fp32 sum\n",
              std::string(Arch::name).c_str(), std::string(precis::format_traits<In>::name).c_str(), len, k, mismatches,
              n, non_ieee, 100.0 * static_cast<double>(non_ieee) / static_cast<double>(n));
  return mismatches == 0 ? 0 : 1;
}

template <class Arch, class In>
bool run_if(const std::string& arch, const std::string& fmt, const char* arch_name, const char* fmt_name, char** f,
            bool zero_c, int& rc) {
  if (arch != arch_name || fmt != fmt_name) return false;
  rc = check<Arch, In>(f[0], f[1], f[2], f[3], zero_c);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  namespace tc = precis::tc;
  const bool zero_c = argc == 8 && std::string(argv[7]) == "--zero-c";
  if (argc != 7 && !zero_c) {
    std::fprintf(stderr, "usage: tc_validate ARCH FORMAT A B C D [--zero-c]\n"
                         "  ARCH FORMAT: sm70 fp16 | sm80 fp16|bf16|tf32 | sm90 fp16|bf16|tf32|e4m3|e5m2 | sm90_wmma fp16|bf16|tf32\n");
    return 2;
  }
  const std::string arch = argv[1], fmt = argv[2];
  char** files = argv + 3;
  int rc = 2;
  try {
    const bool found = run_if<tc::sm70, precis::half>(arch, fmt, "sm70", "fp16", files, zero_c, rc) ||
                       run_if<tc::sm80, precis::half>(arch, fmt, "sm80", "fp16", files, zero_c, rc) ||
                       run_if<tc::sm80, precis::bfloat16>(arch, fmt, "sm80", "bf16", files, zero_c, rc) ||
                       run_if<tc::sm80, precis::tf32>(arch, fmt, "sm80", "tf32", files, zero_c, rc) ||
                       run_if<tc::sm90, precis::half>(arch, fmt, "sm90", "fp16", files, zero_c, rc) ||
                       run_if<tc::sm90, precis::bfloat16>(arch, fmt, "sm90", "bf16", files, zero_c, rc) ||
                       run_if<tc::sm90, precis::tf32>(arch, fmt, "sm90", "tf32", files, zero_c, rc) ||
                       run_if<tc::sm90, precis::float8_e4m3>(arch, fmt, "sm90", "e4m3", files, zero_c, rc) ||
                       run_if<tc::sm90, precis::float8_e5m2>(arch, fmt, "sm90", "e5m2", files, zero_c, rc) ||
                       run_if<tc::sm90_wmma, precis::half>(arch, fmt, "sm90_wmma", "fp16", files, zero_c, rc) ||
                       run_if<tc::sm90_wmma, precis::bfloat16>(arch, fmt, "sm90_wmma", "bf16", files, zero_c, rc) ||
                       run_if<tc::sm90_wmma, precis::tf32>(arch, fmt, "sm90_wmma", "tf32", files, zero_c, rc);
    if (!found) {
      std::fprintf(stderr, "tc_validate: no model for %s %s; valid: sm70 fp16 | sm80 fp16|bf16|tf32 | "
                           "sm90 fp16|bf16|tf32|e4m3|e5m2 | sm90_wmma fp16|bf16|tf32\n", arch.c_str(), fmt.c_str());
      return 2;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  return rc;
}
