// A printable table of format parameters: t, u, emin, emax, smallest normal and subnormal,
// largest finite, with both the exact power-of-two form and a decimal value.
#pragma once

#include <cstdio>
#include <ostream>
#include <string>

#include "precis/format/format_traits.hpp"

namespace precis {

struct format_row {
  std::string name, t, u, emin, emax, min_normal, min_subnormal, max_finite;
};

namespace detail {
inline std::string two_to(long e, long double value) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "2^%ld (%.4Lg)", e, value);
  return buf;
}
}  // namespace detail

/// One row of the table for format T, every number taken from format_traits<T>.
template <floating T>
format_row describe_format() {
  using F = format_traits<T>;
  const auto ld = [](const auto& v) { return static_cast<long double>(v); };
  char maxbuf[64];
  std::snprintf(maxbuf, sizeof maxbuf, "%.6Lg", ld(F::max_finite()));
  return {std::string(F::name),
          std::to_string(F::digits),
          detail::two_to(-F::digits, ld(F::unit_roundoff())),
          std::to_string(F::emin),
          std::to_string(F::emax),
          detail::two_to(F::emin, ld(F::min_normal())),
          detail::two_to(F::has_subnormals ? F::emin - F::digits + 1 : F::emin, ld(F::min_subnormal())),
          maxbuf};
}

/// Writes a Markdown table with one row per format.
template <floating... Ts>
void write_format_table(std::ostream& os) {
  os << "| format | t | u | emin | emax | smallest normal | smallest subnormal | largest finite |\n"
     << "|---|---|---|---|---|---|---|---|\n";
  for (const format_row& r : {describe_format<Ts>()...}) {
    os << "| " << r.name << " | " << r.t << " | " << r.u << " | " << r.emin << " | " << r.emax
       << " | " << r.min_normal << " | " << r.min_subnormal << " | " << r.max_finite << " |\n";
  }
}

/// The table of every format precis ships, narrowest first.
inline void write_format_table(std::ostream& os) {
  write_format_table<float8_e4m3, float8_e5m2, bfloat16, half, tf32, float, double, long double>(os);
}

}  // namespace precis
