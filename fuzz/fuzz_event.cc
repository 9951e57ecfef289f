// SPDX-License-Identifier: Apache-2.0
// Fuzzes the ring-buffer record decoder and the heap tracker behind it: the
// input is cut into records (the first byte of each chunk picks a record
// length around the real one, so short and long records are tried), each
// decoded record is applied, and the tracker's invariants are checked after
// every step and after a resync from the records still live.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <variant>
#include <vector>

#include "core/accounting/event.h"
#include "core/accounting/heap_tracker.h"

namespace {

void check_invariants(const lw::HeapTracker& t) {
  uint64_t live = 0, count = 0, reserved = 0;
  t.for_each_live_at([&](uint64_t addr, const lw::LiveRecord& r) {
    // The process total leaves tensor_gpu out: it lies inside the pool's
    // cuda_device memory (decision tensor-tier). An mmap record counts its
    // committed bytes (decision reserved-address-space).
    if (r.kind != LW_KIND_TENSOR_GPU) live += t.committed_bytes(addr, r);
    if (r.kind == LW_KIND_MMAP) reserved += t.split_of(addr).reserved;
    ++count;
  });
  if (live != t.live_bytes_total() || count != t.live_allocations_total()) abort();
  if (reserved != t.reserved_bytes(LW_KIND_MMAP)) abort();
  for (const lw::SiteStats& s : t.sites()) {
    if (s.allocated_bytes - s.freed_bytes != s.live_bytes + s.reserved_bytes + s.unmapped_bytes) abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  lw::HeapTracker tracker;
  size_t pos = 0;
  while (pos < size) {
    // 0..3 -> 55, 56, 56, 57 bytes: mostly whole records, some cut or long.
    static constexpr size_t kLens[] = {sizeof(lw_event) - 1, sizeof(lw_event), sizeof(lw_event),
                                       sizeof(lw_event) + 1};
    const size_t len = kLens[data[pos] & 3];
    // Bit 2: the mappings say part of an mmap record is reserved, part gone.
    const bool split = data[pos] & 4;
    ++pos;
    if (size - pos < len) {
      // A tail that is not a whole record must be rejected, never read past.
      std::vector<uint8_t> tail(data + pos, data + size);
      if (tail.size() != sizeof(lw_event) && lw::decode_event(tail.data(), tail.size())) abort();
      break;
    }
    // A heap copy of exactly `len` bytes so ASan sees any overread.
    std::vector<uint8_t> record(data + pos, data + pos + len);
    pos += len;
    std::optional<lw::DecodedEvent> e = lw::decode_event(record.data(), record.size());
    if (e && len != sizeof(lw_event)) abort();
    // Only allocs and frees reach the tracker (the other types are the
    // router's); each type's fields are in range.
    if (e) {
      if (const lw::Event* r = std::get_if<lw::Event>(&*e)) {
        if (r->type != lw::EventType::kAlloc && r->type != lw::EventType::kFree) abort();
        if (r->kind >= LW_KIND_MAX) abort();
        tracker.apply(*r);
        if (split && r->kind == LW_KIND_MMAP)
          tracker.set_split(r->addr, r->alloc_ns, lw::RecordSplit{r->size / 2, r->size / 4});
      } else if (const lw::GpuOomEvent* g = std::get_if<lw::GpuOomEvent>(&*e)) {
        if (g->kind >= LW_KIND_MAX || g->device < -1 || g->device > 254) abort();
      } else if (const lw::SigkillEvent* s = std::get_if<lw::SigkillEvent>(&*e)) {
        if (s->sender_comm().size() > 16) abort();
      }
    }
    check_invariants(tracker);
  }
  // A resync against a kernel view made of every other live record.
  std::vector<lw::KernelRecord> kernel;
  bool keep = true;
  tracker.for_each_live_at([&](uint64_t addr, const lw::LiveRecord& r) {
    if (keep) {
      kernel.push_back({r.kind, addr, r.size, r.alloc_ns, tracker.sites()[r.site].stack_hash});
    }
    keep = !keep;
  });
  tracker.resync(kernel);
  check_invariants(tracker);
  if (tracker.live_allocations_total() != kernel.size()) abort();
  return 0;
}
