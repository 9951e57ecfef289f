// SPDX-License-Identifier: Apache-2.0
// For the text view's width (tests/integration/cli_test.cc): one site whose
// demangled function name is far longer than any terminal line, so `top`
// must cut it, keeping its start and its file:line. See target_protocol.h
// for the protocol.
#include <map>
#include <string>
#include <vector>

#include "target_protocol.h"

namespace a_rather_long_namespace_name_for_the_text_width_test {

template <typename Value>
struct RegistryOfThingsThatAreKeptForever {
  // The demangled name runs to some 250 characters with its argument type.
  LW_SITE static void keep_one_block_alive_for_the_width_test(
      std::map<std::string, std::vector<Value>>* registry, size_t bytes) {
    void* block = malloc(bytes);
    if (block == nullptr) lw_die("malloc");
    (*registry)["kept"].push_back(Value());
    kept_blocks.push_back(block);
  }
  static std::vector<void*> kept_blocks;
};

template <typename Value>
std::vector<void*> RegistryOfThingsThatAreKeptForever<Value>::kept_blocks;

}  // namespace a_rather_long_namespace_name_for_the_text_width_test

int main() {
  using a_rather_long_namespace_name_for_the_text_width_test::RegistryOfThingsThatAreKeptForever;
  static std::map<std::string, std::vector<int>> registry;
  RegistryOfThingsThatAreKeptForever<int>::kept_blocks.reserve(16);
  registry["kept"].reserve(16);
  if (lw_ready_wait_go() != 0) return 0;
  for (int i = 0; i < 4; i++)
    RegistryOfThingsThatAreKeptForever<int>::keep_one_block_alive_for_the_width_test(&registry, 3000);
  lw_truth_fact("kept_bytes", 4 * 3000);
  lw_done();
  lw_wait_exit();
  return 0;
}
