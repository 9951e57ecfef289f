// SPDX-License-Identifier: Apache-2.0
// A native leak for bench/busy_native_leak.sh (issue 33): a C++ "op" that
// news without deleting, called from Python through ctypes by
// bench/torch_serve_leak.py --leak native.
//
// The script builds it at run time, as a user's extension would be built:
//   g++ -O2 -fomit-frame-pointer -fPIC -shared native_keep.cc -o libnative_keep.so
// so a stack through it can only be unwound from its call-frame information
// (no frame pointer to follow).
//
// lw_bench_native_keep(n): news n bytes, writes every one of them (the pages
// are resident, as a real op's output would be) and keeps the pointer for
// good. lw_bench_native_kept_bytes(): every byte kept so far, the figure the
// bench compares leakwatch's bytes under the site with.
//
// The pointers go to a fixed array, not a std::vector: a vector growing
// under the same frames would be a second, genuinely growing site and blur
// the one measured. Past the array's end the block is still kept (leaked,
// counted), only no longer reachable. The array is exported: a static one,
// never read, lets -O2 drop the stores and the memset (only the new stays).
#include <cstddef>
#include <cstring>

namespace {
constexpr std::size_t kMaxKept = 1 << 16;  // 4 GiB of 64 KiB blocks
std::size_t kept_count = 0;
std::size_t kept_bytes = 0;
}  // namespace

extern "C" {

__attribute__((visibility("default"))) char* lw_bench_native_kept[kMaxKept];

__attribute__((visibility("default"), noinline)) void lw_bench_native_keep(std::size_t n) {
  char* block = new char[n];
  std::memset(block, static_cast<int>(kept_count & 0x7f) | 1, n);
  if (kept_count < kMaxKept) lw_bench_native_kept[kept_count] = block;
  ++kept_count;
  kept_bytes += n;
}

__attribute__((visibility("default"))) std::size_t lw_bench_native_kept_bytes() { return kept_bytes; }

}  // extern "C"
