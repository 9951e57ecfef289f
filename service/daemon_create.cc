// Daemon::create: the daemon on the BPF engine. Apart from the daemon's
// parts (lw_service), so the unit tests link the parts without libbpf.
#include <algorithm>

#include "engine/bpf_session.h"
#include "service/daemon.h"
#include "service/engine_tracer.h"

namespace lw {

namespace {

BpfOptions bpf_options(const Config& c) {
  BpfOptions o;
  o.ringbuf_bytes = c.ringbuf_bytes;
  o.live_max_entries = c.limits.live_map_entries;
  o.stack_max_entries = c.limits.stack_map_entries;
  o.max_targets = std::max<uint32_t>(c.limits.max_processes * 2, 64);
  o.report_all_execs = true;
  return o;
}

}  // namespace

Result<std::unique_ptr<Daemon>> Daemon::create(DaemonOptions options, Config config) {
  auto tracer = EngineTracer::create(bpf_options(config));
  if (!tracer) return tracer.error();
  return std::make_unique<Daemon>(std::move(options), std::move(config), std::move(*tracer));
}

}  // namespace lw
