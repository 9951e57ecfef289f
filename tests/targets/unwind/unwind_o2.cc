// SPDX-License-Identifier: Apache-2.0
// Oracle target of the unwind-table tests (tests/unit/test_unwind_oracle.cc):
// built as distributions build, -O2 without frame pointers, with functions
// whose CFI takes each shape the BPF unwinder evaluates. Never run by the
// tests, only read; it still runs and exits 0 so it can be traced by hand.
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

// A variable-length array keeps rbp as frame pointer even with
// -fomit-frame-pointer: the CFA is rbp-based (LW_CFA_RBP).
__attribute__((noinline)) int vla_sum(int n) {
  int a[n];
  for (int i = 0; i < n; ++i) a[i] = i * 3;
  int s = 0;
  for (int i = 0; i < n; ++i) s += a[i] ^ (s >> 1);
  return s;
}

struct alignas(64) Block {
  char bytes[64];
};
__attribute__((noinline)) void fill(Block* b, int v) { memset(b->bytes, v, sizeof(b->bytes)); }

// An over-aligned local next to a variable-length array: GCC realigns the
// stack through a DRAP register (%r10) and describes the CFA as
// *(rbp - 8) (LW_CFA_DEREF_RBP).
__attribute__((noinline)) int realigned(int v, int n) {
  Block b;
  char buf[n];
  memset(buf, v, static_cast<size_t>(n));
  fill(&b, buf[n - 1]);
  return b.bytes[3] + v;
}

__attribute__((noinline)) int thrower(int v) {
  if (v > 1000) throw std::runtime_error("big " + std::to_string(v));
  return v + 1;
}

// Pushes of callee-saved registers, rbp among them, and an exception path.
__attribute__((noinline)) int recurse(int depth, std::vector<int>& trail) {
  trail.push_back(depth);
  if (depth == 0) return thrower(static_cast<int>(trail.size()));
  return recurse(depth - 1, trail) + static_cast<int>(trail.size());
}

int main(int argc, char** argv) {
  std::vector<int> trail;
  int total = vla_sum(argc + 10) + realigned(argc, argc + 7);
  try {
    total += recurse(argc * 5, trail);
  } catch (const std::exception& e) {
    fprintf(stderr, "%s\n", e.what());
  }
  printf("%d %s\n", total, argc > 5 ? argv[1] : "");
  return 0;
}
