// SPDX-License-Identifier: Apache-2.0
#include "core/accounting/counters.h"

namespace lw {

namespace {

constexpr std::array<CounterInfo, LW_CNT_MAX> make_table() {
  std::array<CounterInfo, LW_CNT_MAX> t{};
#define LW_COUNTER_INFO(e, v, name, family, reason, help) t[v] = CounterInfo{name, family, reason, help};
  LW_COUNTERS(LW_COUNTER_INFO)
#undef LW_COUNTER_INFO
  return t;
}

constexpr std::array<CounterInfo, LW_CNT_MAX> kCounters = make_table();

}  // namespace

const CounterInfo* counter_info(size_t index) {
  if (index >= kCounters.size() || kCounters[index].name == nullptr) return nullptr;
  return &kCounters[index];
}

const char* counter_name(size_t index) {
  const CounterInfo* c = counter_info(index);
  return c ? c->name : nullptr;
}

}  // namespace lw
