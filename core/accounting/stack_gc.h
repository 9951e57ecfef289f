/* SPDX-License-Identifier: Apache-2.0 */
// Which stored stacks the kernel stack map may give back
// (decision stack-map-gc). The BPF side stores each distinct stack once and
// never deletes one; the daemon deletes those no tracked record has
// referenced for a grace period, so a long run with many short-lived stacks
// does not fill the map for good.
//
// A stack is referenced at a pass when some tracked process has a site on
// its hash with live allocations (frozen sites included: their figures
// stand), or when the sites on its hash counted allocations since the last
// pass (short-lived blocks: still in use, if never live at a pass). A hash
// first seen in the map is referenced then (its events may still be queued
// in the ring buffer). Pure and unit-tested; the tracer reads the map and
// deletes (engine/stack_gc_pass.cc). Thread-safety: not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace lw {

// What the tracked processes hold on one stack hash, summed over their sites.
struct StackUse {
  uint64_t allocations = 0;  // SiteStats::allocations, summed
  bool live = false;         // some site on it has live allocations
  // A process with a site on it (the first found): credited when the stack
  // is deleted, for its share of the stack map (decision fair-shares).
  int32_t owner = 0;
};

using StackUses = std::unordered_map<uint64_t, StackUse>;

class StackCollector {
 public:
  // grace_ns: how long a stack must go unreferenced to be collectable;
  // max_per_pass: the most hashes one pass returns.
  StackCollector(uint64_t grace_ns, size_t max_per_pass);

  // One pass at now_ns: `stored` are hashes in the kernel map now, the
  // next slice of a walk over it (a big map is walked a slice a pass),
  // `uses` what the tracked processes hold. Returns the hashes of the slice
  // to delete, longest unreferenced first, at most max_per_pass; they are
  // forgotten here (one still stored later is new again). `walk_done`: the
  // slice ends the walk, so hashes no slice of it met are gone from the
  // map and forgotten. Reserved hashes (0..2, bpf/leakwatch_abi.h) are
  // never returned.
  std::vector<uint64_t> pass(const std::vector<uint64_t>& stored, const StackUses& uses, uint64_t now_ns,
                             bool walk_done = true);

  // Hashes followed (those met by the last walk and this one, less those returned).
  size_t tracked() const { return seen_.size(); }

 private:
  struct Seen {
    uint64_t last_ref_ns = 0;
    uint64_t allocations = 0;  // StackUse::allocations at the last pass
    uint32_t walk = 0;         // the walk that met it last
  };
  uint64_t grace_ns_;
  size_t max_per_pass_;
  uint32_t walk_ = 0;  // the walk under way
  std::unordered_map<uint64_t, Seen> seen_;
};

}  // namespace lw
