// SPDX-License-Identifier: Apache-2.0
// A bounded queue of jobs served by a fixed set of threads: the HTTP
// front's workers and its authentication thread. A full queue refuses a job
// (the front answers 503) instead of growing.
// Thread-safety: every member may be called from any thread.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>

namespace lw {

class JobQueue {
 public:
  explicit JobQueue(size_t capacity) : capacity_(capacity) {}

  // False when full or stopping: the caller answers 503 instead.
  bool push(std::function<void()> job) {
    {
      std::lock_guard lock(mu_);
      if (stopping_ || jobs_.size() >= capacity_) return false;
      jobs_.push_back(std::move(job));
    }
    cv_.notify_one();
    return true;
  }

  void run() {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
        if (stopping_) return;
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      job();
    }
  }

  void stop() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
      jobs_.clear();
    }
    cv_.notify_all();
  }

 private:
  const size_t capacity_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool stopping_ = false;
};

}  // namespace lw
