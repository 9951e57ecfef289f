// SPDX-License-Identifier: Apache-2.0
// A token bucket: holds up to `burst` tokens, gains one every `interval_ns`,
// and each take() spends one. Starts full. Used for the HTTP front's
// rate_limit (exporter/http/http_web_state.h) and a process's lifecycle budget
// (engine/tracer.h; decision lifecycle-budget).
// Thread-safety: none; one owner.
#pragma once

#include <algorithm>
#include <cstdint>

namespace lw {

class TokenBucket {
 public:
  TokenBucket() = default;
  // interval_ns == 0: no limit (take() always succeeds).
  TokenBucket(uint64_t interval_ns, uint64_t burst, uint64_t now_ns)
      : interval_ns_(interval_ns), burst_(static_cast<double>(std::max<uint64_t>(burst, 1))),
        tokens_(burst_), at_ns_(now_ns) {}

  bool take(uint64_t now_ns) {
    if (interval_ns_ == 0) return true;
    refill(now_ns);
    if (tokens_ < 1) return false;
    tokens_ -= 1;
    return true;
  }
  // Nanoseconds from now_ns until take() would succeed (0: now).
  uint64_t wait_ns(uint64_t now_ns) {
    if (interval_ns_ == 0) return 0;
    refill(now_ns);
    return tokens_ >= 1 ? 0 : static_cast<uint64_t>((1 - tokens_) * static_cast<double>(interval_ns_));
  }
  uint64_t interval_ns() const { return interval_ns_; }

 private:
  void refill(uint64_t now_ns) {
    // A clock that went backwards (it does not: CLOCK_MONOTONIC, steady_clock)
    // adds nothing.
    if (now_ns > at_ns_)
      tokens_ = std::min(burst_, tokens_ + static_cast<double>(now_ns - at_ns_) / static_cast<double>(interval_ns_));
    at_ns_ = now_ns;
  }

  uint64_t interval_ns_ = 0;
  double burst_ = 1;
  double tokens_ = 1;
  uint64_t at_ns_ = 0;
};

}  // namespace lw
