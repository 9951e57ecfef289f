// SPDX-License-Identifier: Apache-2.0
// The publisher: builds one immutable DaemonSnapshot of everything the
// daemon tracks (view/daemon_view.h) and swaps it in for the readers
// (decision daemon-threads). publish() also refreshes the daemon's
// tracked-memory figure (the budget check at attach reads it).
//
// Thread-safety: publish() runs on the consumer thread only (it reads the
// DaemonState and the tracer, which are the consumer's). latest() is
// thread-safe: any thread (the HTTP server's) gets the last published
// snapshot, a shared_ptr to const data swapped under a mutex; a reader never
// waits for a publish to be built, only for the pointer copy.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>

#include "core/analysis/rss_breakdown.h"
#include "service/daemon_state.h"
#include "service/tracer_control.h"
#include "view/daemon_view.h"

namespace lw {

// Where the time of the last publish went (debug log, bench/publish_bench).
struct PublishTiming {
  size_t processes = 0;
  double total_ms = 0;      // the whole publish, swap included
  double snapshots_ms = 0;  // the per-process views (ranking, symbolizing, copying)
  double release_ms = 0;    // freeing the previous snapshot (when no reader holds it)
};

// Whether the consumer loop publishes now: once a second in any case, and
// at once when the tracked set or a process's probes changed (`dirty`),
// unless the last publish was costly: a dirty publish then waits until the
// time since the last one is 4x what that one took, so publishing takes at
// most a fifth of the consumer's time at any scale (1,000 processes: tens
// of ms a publish; decision daemon-in-parts). With a few processes a
// publish takes well under a millisecond and nothing waits.
bool publish_due(bool dirty, double since_last_ms, double last_cost_ms);

class Publisher {
 public:
  Publisher(DaemonState& state, TracerControl& tracer) : state_(state), tracer_(tracer) {}

  // Consumer thread only.
  void publish();
  const PublishTiming& last_timing() const { return last_timing_; }

  // Any thread.
  std::shared_ptr<const DaemonSnapshot> latest() const;

 private:
  DaemonState& state_;
  TracerControl& tracer_;
  PublishTiming last_timing_;
  RssSampler rss_{15};  // RSS explained: rate-bounded smaps reads (decision rss-explained)
  mutable std::mutex mu_;
  std::shared_ptr<const DaemonSnapshot> latest_;
};

}  // namespace lw
