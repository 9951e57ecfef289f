// SPDX-License-Identifier: Apache-2.0
// Symbolization off the event path (docs/architecture.md, "Symbolization").
//
// Callers ask for (module, file offset) with lookup(), which never blocks on
// file or network work: it returns the frames when they are resolved, and
// otherwise queues the address for the symbol thread and returns nullptr
// (the caller shows `module+0xOFFSET` meanwhile, frame_display_name()). The
// symbol thread owns the Symbolizer (libdw) and the debuginfod fetcher;
// results go into a bounded cache, and generation() changes whenever new
// results are there, so a caller knows when to look again. When a debug file
// arrives from debuginfod after a module was first resolved without it, the
// module's addresses already resolved are resolved again and replaced.
//
// The API does not care how a stack was captured: a module is its identity
// (path as the target sees it, path to open, build-id, dev/inode, the
// target's root) and an address is a file offset in it.
//
// Bounds: the queue (max_queue addresses; past it a request is dropped,
// counted, and asked again at the caller's next look) and the results
// (max_results addresses, oldest evicted first).
//
// Thread-safety: lookup(), generation(), counters() and wait_idle() may be
// called from any thread; they take a mutex that the symbol thread holds
// only to take requests and publish results, never while it reads files.
// Construction and destruction (which joins the thread) are not concurrent
// with other calls.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/config/config.h"
#include "core/symbols/debuginfod.h"
#include "core/symbols/symbol_counters.h"
#include "core/symbols/symbolizer.h"

namespace lw {

struct SymbolServiceOptions {
  // The service keeps the results; the Symbolizer's own per-module cache
  // only spares work after an eviction, so it is kept small.
  SymbolizerLimits limits = {.max_cached_addresses_per_module = 4096};
  DebugSearchOptions search;  // search.debuginfod_cache_dir is set from `debuginfod`
  DebuginfodOptions debuginfod;
  size_t max_queue = 8192;
  // Measured ~1.2 KiB of RSS per address resolved (key, frames and their
  // strings, the Symbolizer's entry): ~20 MiB full.
  size_t max_results = 1u << 14;
};

// From the config's `symbols` section (docs/config.md).
SymbolServiceOptions symbol_service_options(const SymbolsConfig& config);

class SymbolService {
 public:
  explicit SymbolService(SymbolServiceOptions options);
  ~SymbolService();  // stops the thread (a running libdw call finishes first)
  SymbolService(const SymbolService&) = delete;
  SymbolService& operator=(const SymbolService&) = delete;

  using Frames = std::shared_ptr<const std::vector<Frame>>;
  struct Lookup {
    // The frames of the address: its inline chain, innermost first, the
    // physical frame last; every frame carries module, build_id and
    // offset. nullptr while not resolved yet.
    Frames frames;
    // Resolved with what is there now, while a debuginfod fetch for the
    // module runs: the frames may still be replaced.
    bool provisional = false;
    // Resolved without a name for a reason the reader should know
    // (kSymbolsFileGone, ...; core/symbols/symbolizer.h); "" otherwise.
    const char* missing = "";
  };
  // The return address at `file_offset` in `module`. Not resolved yet: it
  // is queued now (unless already queued, or the queue is full). Never
  // blocks on I/O.
  Lookup lookup(const ModuleRef& module, uint64_t file_offset);
  // Changes whenever results were published.
  uint64_t generation() const { return generation_.load(std::memory_order_acquire); }
  SymbolCounters counters() const;
  // Waits until nothing is queued or being resolved (and, with
  // `fetches`, no debuginfod fetch runs), at most `timeout`. True if idle.
  bool wait_idle(std::chrono::milliseconds timeout, bool fetches = true);
  const SymbolServiceOptions& options() const { return options_; }

 private:
  struct Request {
    std::string key;  // module key + offset
    ModuleRef module;
    uint64_t offset = 0;
  };
  void run();
  void resolve_batch(std::vector<Request>& batch);
  void fetched(const std::string& build_id, bool ok);
  struct Known;
  // One module's addresses once a fetch for its build-id ended.
  void refetched(Known& known, bool ok);

  const SymbolServiceOptions options_;

  mutable std::mutex mu_;
  std::condition_variable wake_;       // requests arrived, or stop
  std::condition_variable idle_;       // the thread finished a round
  std::deque<Request> queue_;
  struct Entry {
    Frames frames;  // nullptr: queued
    bool provisional = false;
    const char* missing = "";  // Lookup::missing
  };
  // Lookup::missing for frames just resolved in `module`.
  const char* why_unnamed(const ModuleRef& module, const std::vector<Frame>& frames);
  std::unordered_map<std::string, Entry> results_;
  std::deque<std::string> result_order_;              // oldest first, for eviction
  bool busy_ = false;                                 // the thread holds a batch
  size_t fetches_busy_ = 0;
  bool stop_ = false;
  SymbolCounters counters_;
  std::atomic<uint64_t> generation_{1};

  // Symbol thread only.
  std::unique_ptr<Symbolizer> symbolizer_;
  std::unique_ptr<DebuginfodFetcher> fetcher_;
  // Modules (by shared_module_key(): a debug file fetched for a build-id
  // serves each file with it, but every file keeps its own module and
  // results) with the addresses resolved in them, to resolve again when
  // their debug file arrives.
  struct Known {
    ModuleRef module;
    std::vector<std::pair<std::string, uint64_t>> addresses;  // key, offset
  };
  std::unordered_map<std::string, Known> known_;

  std::thread thread_;
};

}  // namespace lw
