// SPDX-License-Identifier: Apache-2.0
// Daemon::create: the daemon on the BPF engine. Apart from the daemon's
// parts (lw_service), so the unit tests link the parts without libbpf.
#include <algorithm>

#include "engine/bpf_session.h"
#include "engine/unwind_tables.h"
#include "service/daemon.h"
#include "service/engine_tracer.h"

namespace lw {

namespace {

BpfOptions bpf_options(const Config& c, const DaemonOptions& options) {
  BpfOptions o;
  o.ringbuf_bytes = c.ringbuf_bytes;
  o.live_max_entries = options.live_map.entries;
  o.live_prealloc = options.bench_live_prealloc.value_or(options.live_map.preallocated);
  o.uprobe_sessions = options.bench_uprobe_sessions;
  o.stack_max_entries = c.limits.stack_map_entries;
  o.fair_share_percent = c.limits.fair_share_percent;
  o.stack_gc_grace_ms = c.limits.stack_gc_grace_seconds * 1000u;
  o.max_targets = std::max<uint32_t>(c.limits.max_processes * 2, 64);
  o.report_all_execs = true;
  o.unwind_cfi = c.unwind.cfi;
  o.python_frames = c.unwind.python_frames;
  o.python_native_above = c.unwind.native_frames_above_python;
  return o;
}

UnwindTableOptions unwind_options(const Config& c) {
  UnwindTableOptions o;
  o.max_table_bytes = c.unwind.max_table_bytes;
  o.cache_dir = c.unwind.cache_dir;
  o.cache_max_bytes = c.unwind.cache_max_bytes;
  return o;
}

}  // namespace

Result<std::unique_ptr<Daemon>> Daemon::create(DaemonOptions options, Config config) {
  options.live_map = live_map_sizing(config);
  auto tracer = EngineTracer::create(bpf_options(config, options), unwind_options(config));
  if (!tracer) return tracer.error();
  log_live_map(options.live_map);
  (*tracer)->configure_symbols(config.symbols);
  return std::make_unique<Daemon>(std::move(options), std::move(config), std::move(*tracer));
}

}  // namespace lw
