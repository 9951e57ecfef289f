// SPDX-License-Identifier: Apache-2.0
// Failed operator new, which libstdc++ reports by throwing std::bad_alloc
// out of operator new (the nothrow variants call the throwing one and catch
// inside). Nothing may be counted for a failed call, and tracing must not
// break the unwinding: a tracer that hijacks operator new's return address
// (a uretprobe) leaves the unwinder a frame it cannot step through, and the
// program dies in std::terminate. See target_protocol.h.
//
//   new_fail --nothrow   huge nothrow new / new[] (aligned too) return null
//   new_fail --throw     huge new / new[] (aligned too) throw, caught here
#include <cstddef>
#include <cstdint>
#include <new>

#include "target_protocol.h"

namespace {

enum { ATTEMPTS = 10, LEAK_BYTES = 999 };

// Huge sizes come through a volatile so the calls can't be folded away.
volatile std::size_t huge_size = SIZE_MAX / 2;
void *volatile sink;

}  // namespace

extern "C" {

// One successful allocation, so the test also sees that tracing goes on
// after the failures.
LW_SITE void new_fail_leak(void) {
  sink = new char[LEAK_BYTES];
}

LW_SITE int new_fail_nothrow(void) {
  int failed = 0;
  failed += ::operator new(huge_size, std::nothrow) == nullptr;
  failed += ::operator new[](huge_size, std::nothrow) == nullptr;
  failed += ::operator new(huge_size, std::align_val_t{64}, std::nothrow) == nullptr;
  failed += ::operator new[](huge_size, std::align_val_t{64}, std::nothrow) == nullptr;
  return failed;
}

LW_SITE int new_fail_throw(void) {
  int caught = 0;
  try {
    sink = ::operator new(huge_size);
  } catch (const std::bad_alloc &) {
    caught++;
  }
  try {
    sink = ::operator new[](huge_size);
  } catch (const std::bad_alloc &) {
    caught++;
  }
  try {
    sink = ::operator new(huge_size, std::align_val_t{64});
  } catch (const std::bad_alloc &) {
    caught++;
  }
  try {
    sink = ::operator new[](huge_size, std::align_val_t{64});
  } catch (const std::bad_alloc &) {
    caught++;
  }
  return caught;
}

}  // extern "C"

int main(int argc, char **argv) {
  const bool throwing = argc > 1 && strcmp(argv[1], "--throw") == 0;
  if (lw_ready_wait_go() != 0) return 0;
  int failed = 0;
  for (int i = 0; i < ATTEMPTS; i++) failed += throwing ? new_fail_throw() : new_fail_nothrow();
  if (failed != 4 * ATTEMPTS) {
    errno = ENOMEM;
    lw_die("a huge operator new succeeded");
  }
  new_fail_leak();
  lw_truth_site(throwing ? "new_fail_throw" : "new_fail_nothrow", 0);
  lw_truth_site("new_fail_leak", LEAK_BYTES);
  lw_truth_fact("failed", failed);
  lw_truth_total(LEAK_BYTES);
  lw_done();
  lw_wait_exit();
  return 0;
}
