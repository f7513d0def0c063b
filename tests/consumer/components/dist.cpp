// precis::dist: compiles and links against MPI; shard() needs no running MPI job.
#include <cstdint>
#include <cstdio>

#include <precis/dist/all.hpp>

int main() {
  // 10 items over 3 ranks: contiguous shards whose sizes differ by at most one
  std::int64_t next = 0;
  bool ok = true;
  for (int r = 0; r < 3; ++r) {
    const auto [begin, end] = precis::dist::shard(10, r, 3);
    std::printf("rank %d of 3: [%lld, %lld)\n", r, static_cast<long long>(begin), static_cast<long long>(end));
    ok = ok && begin == next && (end - begin == 3 || end - begin == 4);
    next = end;
  }
  return ok && next == 10 ? 0 : 1;
}
