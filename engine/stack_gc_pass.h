/* SPDX-License-Identifier: Apache-2.0 */
// The stack map's collection (decision stack-map-gc; what to delete is
// core/accounting/stack_gc.h's pure StackCollector): a pass when one is
// due deletes the stored stacks no tracked record referenced for the grace
// period, bounded per pass; the stacks the last pass deleted are kept
// until the next, since an event still queued may name one.
// Thread-safety: not thread-safe; runs on the tracer's thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <unordered_map>

#include "core/accounting/stack_gc.h"
#include "engine/bpf_session.h"
#include "engine/traced_process.h"
#include "view/process_view.h"

namespace lw {

class StackGcPass {
 public:
  // grace_ms 0: collection off (read_stack() still reads).
  StackGcPass(BpfSession& session, TracerStats& stats, uint32_t grace_ms);

  // A pass when one is due (after a poll's events).
  // Credits each deleted stack to its owner's TracedProcess::stacks_freed.
  void run(ProcessTable& procs);
  // The stored stack of a hash, or of one the last pass deleted (stored
  // again then: a record names it).
  StoredStack read_stack(uint64_t stack_hash);
  // The same without storing a deleted one again (a look, no write).
  StoredStack peek_stack(uint64_t stack_hash) const;

 private:
  static constexpr size_t kMaxStacksCollectedPerPass = 1024;
  // Keys walked a pass: the default map whole; a bigger one a slice a pass,
  // so no pass holds the event thread for long (21 ms per 16,384 keys).
  static constexpr size_t kStackKeysPerPass = 16384;
  // What every tracked process holds, exited ones too.
  static StackUses stack_uses(const ProcessTable& procs);
  void restore_live(const StackUses& uses);

  BpfSession& session_;
  TracerStats& stats_;
  std::unique_ptr<StackCollector> stack_gc_;  // null: off
  uint64_t stack_gc_period_ns_ = 0;
  uint64_t stack_gc_due_ns_ = 0;
  std::optional<uint64_t> stack_walk_after_;  // where the walk goes on; none: from the first
  uint64_t stack_walk_count_ = 0;             // stacks met by the walk so far, less those deleted
  // What the last pass deleted, kept until the next: an event queued in
  // the ring buffer before the delete may still name one.
  std::unordered_map<uint64_t, lw_stack> collected_;
};

}  // namespace lw
