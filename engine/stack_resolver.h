/* SPDX-License-Identifier: Apache-2.0 */
// Turns a kernel stack hash of a traced process into a ResolvedStack:
// frames located in the process's mappings, the allocator's own frames
// dropped, Python frames spliced in (decision python-frames), the stable
// stack id, and symbols from the symbol service (core/symbols/
// symbol_service.h) where it has them, module+offset where not yet.
//
// Two paths. The poll path (after a poll's events) calls maps_miss_frames()
// for each live process: when a new site's stack has a frame outside the
// mappings last read, the tracer reads /proc/PID/maps again (and registers
// the new objects' unwind tables) then. The snapshot path (resolve()) only
// reads: the stack map, the mappings and the symbol service's results; it
// never reads /proc/PID/maps or registers unwind tables.
// Thread-safety: not thread-safe; runs on the tracer's thread. The symbol
// service runs its own thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "core/config/config.h"
#include "core/proc/proc_maps.h"
#include "core/symbols/symbol_service.h"
#include "engine/bpf_session.h"
#include "engine/stack_gc_pass.h"
#include "engine/traced_process.h"
#include "engine/unwind_tables.h"

namespace lw {

class StackResolver {
 public:
  // `unwind`: null when stacks come from frame pointers only.
  StackResolver(StackGcPass& stacks, const UnwindTables* unwind);

  // The symbolized stack for a kernel stack hash of `proc` (cached). Never
  // reads debug information itself: frames the symbol thread has not
  // resolved yet show module+offset (symbols_pending), and a later call
  // shows what arrived meanwhile.
  const ResolvedStack& resolve(TracedProcess& proc, uint64_t stack_hash);

  // The poll path: whether a site added to `proc`'s heap since the last
  // call has a stack frame outside `proc.maps` (the caller then reads the
  // maps again). Reads at most kMaxSitesCheckedPerPoll stacks a call.
  bool maps_miss_frames(TracedProcess& proc);

  // The poll path, after `proc.maps` was read: the build-ids of its
  // executable objects, captured while it lives (TracedProcess::build_ids).
  void note_build_ids(TracedProcess& proc);

  // Replaces the symbol service (its caches too) when `config` differs from
  // the running one's search, debuginfod and bounds.
  void configure_symbols(const SymbolsConfig& config);
  bool wait_for_symbols(std::chrono::milliseconds timeout) { return symbols_->wait_idle(timeout); }
  SymbolCounters symbol_counters() const { return symbols_->counters(); }

 private:
  // Where a stored frame is: its mapping and file offset.
  struct Located {
    const MapEntry* map = nullptr;
    uint64_t offset = 0;
  };
  static constexpr size_t kMaxBuildIdCache = 4096;
  static constexpr size_t kMaxSitesCheckedPerPoll = 4096;
  // A perf map is read again at most this often (its appends).
  static constexpr uint64_t kPerfMapReadIntervalNs = 100'000'000;

  Located locate(const TracedProcess& proc, const StoredFrame& f) const;
  std::vector<Located> locate_all(const TracedProcess& proc, const StoredStack& stored) const;
  // The first frame that is the site: frames inside the probed functions
  // themselves are the allocator's.
  static size_t site_frame(const TracedProcess& proc, const StoredStack& stored,
                           const std::vector<Located>& where);
  // The address the symbol service takes for a located frame, and the
  // physical frame the stack id hashes.
  StackAddress address_of(const TracedProcess& proc, const StoredFrame& f, const Located& l,
                          Frame& physical);
  // Replaces the CPython evaluation frames of `rs` (is_eval[i] for
  // physical[i]) with the stored Python frames (core/symbols/python_frames.h).
  void splice_python_frames(TracedProcess& proc, const StoredStack& stored,
                            const std::vector<bool>& is_eval, std::vector<Frame>& physical,
                            ResolvedStack& rs);
  // Frames from the symbol service where it has them, module+offset where
  // not yet; JIT frames from `jit` (the process's perf map, null: none).
  void render_symbols(ResolvedStack& rs, const PerfMap* jit, bool jit_final);
  // The process's perf map, read again when due (null: none).
  const PerfMap* jit_names(TracedProcess& proc);
  const std::string& build_id_of(const MapEntry& m, const std::string& open_path);

  StackGcPass& stacks_;
  const UnwindTables* unwind_;
  std::unique_ptr<SymbolService> symbols_;
  SymbolsConfig symbols_config_;
  // (dev major, dev minor, inode) -> build-id ("" when the file has none).
  std::map<std::tuple<uint32_t, uint32_t, uint64_t>, std::string> build_ids_;
};

}  // namespace lw
