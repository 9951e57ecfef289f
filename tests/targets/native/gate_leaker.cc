// SPDX-License-Identifier: Apache-2.0
// The leak gate's C++ target (tests/integration/gate_test.cc; decision
// leak-gate), built as users build: -O2, no frame pointers. Not a
// line-protocol target: `leakwatch test` starts it and reads what it holds
// at its exit. The mode is argv[1]:
//   clean   allocates and frees (vectors, strings, new/delete), exits 0
//   leak    also leaks 3 x 10000 B from gate::leak_first
//   two     also leaks 3 x 10000 B from gate::leak_first and 5 x 7000 B
//           from gate::leak_second
//   exit3   clean, then exits with status 3 (the gate passes it through)
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace gate {

char* volatile kept[16];
int kept_count;

// noinline and an asm barrier: the call chain survives -O2 (no inlining,
// no tail call), so the leaf frame is this function.
__attribute__((noinline)) void leak_first(int blocks) {
  for (int i = 0; i < blocks; ++i) kept[kept_count++] = new char[10000];
  asm volatile("" ::: "memory");
}

__attribute__((noinline)) void leak_second(int blocks) {
  for (int i = 0; i < blocks; ++i) kept[kept_count++] = new char[7000];
  asm volatile("" ::: "memory");
}

__attribute__((noinline)) size_t churn() {
  size_t sum = 0;
  for (int round = 0; round < 100; ++round) {
    std::vector<std::string> words;
    for (int i = 0; i < 50; ++i) words.push_back(std::string(100 + i, 'x'));
    char* block = new char[4096];
    std::memset(block, round, 4096);
    sum += block[round] + words.size();
    delete[] block;
  }
  asm volatile("" ::: "memory");
  return sum;
}

}  // namespace gate

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "clean";
  const size_t sum = gate::churn();
  if (mode == "leak" || mode == "two") gate::leak_first(3);
  if (mode == "two") gate::leak_second(5);
  printf("gate_leaker %s: %zu\n", mode.c_str(), sum);
  return mode == "exit3" ? 3 : 0;
}
