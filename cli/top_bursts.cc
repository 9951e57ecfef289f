// SPDX-License-Identifier: Apache-2.0
#include "cli/top_bursts.h"

#include <cerrno>
#include <cstdio>

#include "engine/tracer.h"

namespace lw {

std::optional<BurstParams> parse_bursts(const std::string& text, std::string* error) {
  unsigned burst = 0, period = 0;
  char tail = 0;
  if (std::sscanf(text.c_str(), "%u/%u%c", &burst, &period, &tail) != 2 || burst < 1 || period > 3600 ||
      period < 2 * burst) {
    *error =
        "--bursts must be SECONDS/PERIOD, whole seconds, SECONDS >= 1, 2 * SECONDS <= PERIOD <= 3600 (got '" +
        text + "')";
    return std::nullopt;
  }
  return BurstParams{static_cast<double>(burst), static_cast<double>(period)};
}

bool parse_window(const std::string& text, std::optional<BurstParams>& params, std::string* error) {
  if (!params) {
    *error = "--window needs --bursts";
    return false;
  }
  unsigned window = 0;
  char tail = 0;
  if (std::sscanf(text.c_str(), "%u%c", &window, &tail) != 1 || window < 1 ||
      window + params->burst_s > params->period_s) {
    *error = "--window must be whole seconds, at least 1, and fit in the period with the burst (got '" + text + "')";
    return false;
  }
  params->window_s = window;
  params->walk = params->force_windows = true;
  return true;
}

Status TopBursts::start(Tracer& tracer, pid_t pid, const BurstParams& params, double now_s) {
  params_ = params;
  if (params.force_windows && !tracer.heap_walkable(pid))
    return Error{EINVAL, "--window: pid " + std::to_string(pid) +
                             "'s malloc is not glibc's (libc.so.6): its heap cannot be walked"};
  if (Status st = tracer.set_bursts(pid, params.fraction()); !st) return st;
  if (Status st = tracer.set_drain(pid, true); !st) return st;
  state_.enter(now_s, 0, params_, uniform());
  return ok_status();
}

Status TopBursts::tick(Tracer& tracer, pid_t pid, double now_s) {
  if (!state_.active()) return ok_status();
  switch (state_.tick(now_s, 0, 0, params_, uniform())) {
    case BurstAction::kBurstStart:
    case BurstAction::kWalkThenBurst:  // set_drain(false) walks the heap first
      return tracer.set_drain(pid, false);
    case BurstAction::kBurstEnd: return tracer.set_drain(pid, true);
    case BurstAction::kPark: return tracer.set_parked(pid, true);
    default:  // no budget: the bursts go on
      return ok_status();
  }
}

}  // namespace lw
