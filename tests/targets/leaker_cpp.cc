// SPDX-License-Identifier: Apache-2.0
// Leaks known amounts through every replaceable operator new / new[]
// variant (plain, nothrow, aligned, aligned + nothrow), each from its own
// call site, amid sites that new and delete a lot. See target_protocol.h.
//
// libstdc++'s operator new calls malloc (and the aligned ones aligned_alloc),
// so each block is seen by two probes: it must count once, at the function
// that called operator new. Operator delete goes through free.
//
// Failed operator new is in new_fail.cc: it throws through the probed
// operator new, which is a test of its own.
//
// The site functions are extern "C" so their names in the ground truth are
// exactly the names a symbolizer reports, with no demangling conventions.
#include <cstddef>
#include <new>

#include "target_protocol.h"

namespace {

void *volatile keep[128];
unsigned keep_count;

// Where churn sites store each block before deleting it, so that the
// compiler may not elide the new/delete pair.
void *volatile sink;

void keep_ptr(void *p) {
  if (p == nullptr) lw_die("operator new returned null");
  if (keep_count == sizeof keep / sizeof keep[0]) {
    errno = ENOBUFS;
    lw_die("keep[] full");
  }
  keep[keep_count++] = p;
}

// Above __STDCPP_DEFAULT_NEW_ALIGNMENT__ (16), so new-expressions of it call
// the align_val_t overloads.
struct alignas(64) Aligned {
  char bytes[192];
};

struct Blob {
  char bytes[212];
};

}  // namespace

extern "C" {

LW_SITE unsigned long long leak_new(void) {
  for (int i = 0; i < 5; i++) keep_ptr(new Blob);
  return 5 * sizeof(Blob);
}

LW_SITE unsigned long long leak_new_array(void) {
  for (int i = 0; i < 2; i++) keep_ptr(new char[1234]);
  return 2 * 1234;
}

LW_SITE unsigned long long leak_new_nothrow(void) {
  keep_ptr(new (std::nothrow) Blob);
  keep_ptr(::operator new(333, std::nothrow));
  return sizeof(Blob) + 333;
}

LW_SITE unsigned long long leak_new_array_nothrow(void) {
  for (int i = 0; i < 3; i++) keep_ptr(new (std::nothrow) char[777]);
  return 3 * 777;
}

LW_SITE unsigned long long leak_new_aligned(void) {
  keep_ptr(new Aligned);
  keep_ptr(::operator new(4100, std::align_val_t{256}));
  return sizeof(Aligned) + 4100;
}

LW_SITE unsigned long long leak_new_array_aligned(void) {
  keep_ptr(new Aligned[3]);
  return 3 * sizeof(Aligned);
}

LW_SITE unsigned long long leak_new_aligned_nothrow(void) {
  keep_ptr(::operator new(1111, std::align_val_t{128}, std::nothrow));
  return 1111;
}

LW_SITE unsigned long long leak_new_array_aligned_nothrow(void) {
  keep_ptr(new (std::nothrow) Aligned[5]);
  keep_ptr(::operator new[](2221, std::align_val_t{512}, std::nothrow));
  return 5 * sizeof(Aligned) + 2221;
}

// 3 MiB through operator new: malloc's own mmap inside, counted once, heap.
LW_SITE unsigned long long leak_new_big(void) {
  keep_ptr(new char[3u << 20]);
  return 3u << 20;
}

// Every variant, deleted through every matching delete (sized, aligned).
LW_SITE void churn_new_delete(void) {
  for (int i = 0; i < 300; i++) {
    Blob *b = new Blob;
    sink = b;
    delete b;
    char *a = new char[10 + i];
    sink = a;
    delete[] a;
    Aligned *x = new Aligned;
    sink = x;
    delete x;
    Aligned *xs = new Aligned[2];
    sink = xs;
    delete[] xs;
    void *p = ::operator new(100, std::nothrow);
    sink = p;
    ::operator delete(p, std::nothrow);
    p = ::operator new[](200, std::align_val_t{64}, std::nothrow);
    sink = p;
    ::operator delete[](p, std::align_val_t{64}, std::nothrow);
    p = ::operator new(300, std::align_val_t{128});
    sink = p;
    ::operator delete(p, 300, std::align_val_t{128});
  }
}

}  // extern "C"

namespace {

void work() {
  churn_new_delete();
  lw_truth_site("churn_new_delete", 0);

  struct Leak {
    const char *name;
    unsigned long long (*fn)(void);
  };
  const Leak leaks[] = {
      {"leak_new", leak_new},
      {"leak_new_array", leak_new_array},
      {"leak_new_nothrow", leak_new_nothrow},
      {"leak_new_array_nothrow", leak_new_array_nothrow},
      {"leak_new_aligned", leak_new_aligned},
      {"leak_new_array_aligned", leak_new_array_aligned},
      {"leak_new_aligned_nothrow", leak_new_aligned_nothrow},
      {"leak_new_array_aligned_nothrow", leak_new_array_aligned_nothrow},
      {"leak_new_big", leak_new_big},
  };
  unsigned long long total = 0;
  for (const Leak &leak : leaks) {
    unsigned long long n = leak.fn();
    lw_truth_site(leak.name, n);
    total += n;
  }
  lw_truth_total(total);
}

}  // namespace

int main() {
  if (lw_ready_wait_go() != 0) return 0;
  work();
  lw_done();
  lw_wait_exit();
  return 0;
}
