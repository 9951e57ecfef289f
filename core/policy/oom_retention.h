// SPDX-License-Identifier: Apache-2.0
// Which OOM reports are kept (issue 32, item 6; decision oom-kill-reports):
// any local user can SIGKILL their own traced processes, and each kill is a
// report (reason `sigkill`). Unbounded, those reports evicted the reports of
// real memory kills, filled oom.report_dir and made /api/v1/oom_kills too big
// to serve. So:
//   - a user's `sigkill` reports are rate-limited (a token bucket per real
//     uid) and capped in number per uid; root's are not (root can stop the
//     daemon anyway, and a runtime's grace-period kills come in bursts);
//   - the kept set is bounded in count (oom.max_reports) and in bytes
//     (oom.max_total_bytes); over either bound, `sigkill` reports (not for
//     memory) go first, the uid holding the most losing its oldest; then the
//     oldest of the reports for memory.
// A `sigkill` report never evicts a report for memory: it is dropped itself
// instead.
// Pure (time passed in); not thread-safe: owned by the OOM recorder.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/platform/token_bucket.h"

namespace lw {

// Eviction order: a lower tier goes first. kSigkill: reason `sigkill`;
// kForMemory: every other reason (for_memory true).
enum class OomReportTier : uint8_t { kSigkill = 0, kForMemory = 1 };

// What retention knows of a kept report.
struct OomReportMeta {
  std::string id;      // oom-<unix ms, 13 digits>-<pid>[-gpu<device>]: sorts by time
  OomReportTier tier = OomReportTier::kForMemory;
  std::optional<uint32_t> uid;  // the victim's real uid; nullopt: unknown (older files)
  uint64_t bytes = 0;  // the report's JSON text
};

struct OomRetentionLimits {
  size_t max_reports = 100;                   // oom.max_reports
  uint64_t max_total_bytes = 64ull << 20;     // oom.max_total_bytes
  uint32_t max_sigkill_reports_per_uid = 10;  // oom.max_sigkill_reports_per_uid
  uint32_t sigkill_reports_per_uid_per_minute = 6;  // oom.sigkill_reports_per_uid_per_minute; 0: no limit
};

// Why a report was not kept (leakwatch_oom_reports_dropped_total{cause}).
enum class OomDropCause : uint8_t { kRateLimited = 0, kUidCap = 1, kRetention = 2 };
inline constexpr size_t kOomDropCauses = 3;
// "rate_limited" | "uid_cap" | "retention"
const char* oom_drop_cause_name(OomDropCause c);

class OomRetention {
 public:
  // Buckets kept at once; past it they are all forgotten (each uid starts
  // with a full burst again; the count cap and the tiers still hold).
  static constexpr size_t kMaxUids = 4096;

  explicit OomRetention(OomRetentionLimits limits = {}) : limits_(limits) {}
  void set_limits(const OomRetentionLimits& limits);
  const OomRetentionLimits& limits() const { return limits_; }

  // Whether a `sigkill` report of a process of `uid` may be taken now (a
  // token spent). Root's and unknown uids' always may.
  bool admit_sigkill(std::optional<uint32_t> uid, uint64_t now_ns);

  struct Eviction {
    size_t index;  // into the vector given to evict()
    OomDropCause cause;
  };
  // What to drop from `kept` (newest first) so that it fits the limits:
  // indices, each once, in the order chosen. The newest report (index 0)
  // may be among them: it did not earn a place.
  std::vector<Eviction> evict(const std::vector<OomReportMeta>& kept) const;

 private:
  OomRetentionLimits limits_;
  std::map<uint32_t, TokenBucket> buckets_;
};

}  // namespace lw
