// Comm::allreduce_sum_in_rank_order on 3 ranks (issue 41, item 4): values whose floating-point
// sum depends on the order of addition (1, 1e16, -1e16: 0 in rank order, 1 in others) come out as
// the rank-order sum, bit for bit, on every rank; also in two sub-communicators holding the same
// values in the same positions. Prints one line per rank; rank_order_test compares them.
#include <cstdio>
#include <cstring>

#include "runtime/comm.hpp"

int main() {
  gc::rt::Comm& world = gc::rt::Comm::world();
  if (world.size() != 3) {
    std::fprintf(stderr, "rank_order_sum: run on 3 ranks\n");
    return 2;
  }
  const double values[3] = {1.0, 1e16, -1e16};
  double x[2] = {values[world.rank()], 2.0 * values[world.rank()]};
  world.allreduce_sum_in_rank_order(x, 2);
  const double expected[2] = {(1.0 + 1e16) + -1e16, (2.0 + 2e16) + -2e16};
  const bool same = std::memcmp(x, expected, sizeof x) == 0;
  std::printf("rank %d: %.17g %.17g %s\n", world.rank(), x[0], x[1], same ? "rank-order" : "OTHER ORDER");
  world.finalize();
  return same ? 0 : 1;
}
