// SPDX-License-Identifier: Apache-2.0
#include "core/symbols/symbol_service.h"

#include <cinttypes>
#include <cstdio>

namespace lw {

namespace {

// Requests taken per round: the lock is not held while they are resolved,
// so a bigger batch only delays the first results.
constexpr size_t kBatch = 256;
// How often the thread looks at running fetches.
constexpr auto kFetchPoll = std::chrono::milliseconds(100);

// Results are shared as the Symbolizer shares modules: by build-id and the
// file (device, inode), never by build-id alone (decision file-identity).
std::string address_key(const ModuleRef& ref, uint64_t offset) {
  char buf[24];
  snprintf(buf, sizeof(buf), "@%" PRIx64, offset);
  return shared_module_key(ref) + buf;
}

}  // namespace

SymbolServiceOptions symbol_service_options(const SymbolsConfig& config) {
  SymbolServiceOptions o;
  o.search.debug_dirs = config.debug_dirs;
  o.limits.max_inflated_bytes = config.max_inflated_bytes;
  o.debuginfod.urls = config.debuginfod_urls;
  o.debuginfod.cache_dir = config.cache_dir;
  o.debuginfod.cache_max_bytes = config.cache_max_bytes;
  o.debuginfod.timeout_seconds = config.timeout_seconds;
  return o;
}

SymbolService::SymbolService(SymbolServiceOptions options) : options_(std::move(options)) {
  SymbolServiceOptions o = options_;
  // The cache is read only while fetching is on: "off" touches nothing of it.
  if (!o.debuginfod.urls.empty()) o.search.debuginfod_cache_dir = o.debuginfod.cache_dir;
  else o.search.debuginfod_cache_dir.clear();
  symbolizer_ = std::make_unique<Symbolizer>(o.limits, o.search);
  fetcher_ = std::make_unique<DebuginfodFetcher>(o.debuginfod);
  thread_ = std::thread([this] { run(); });
}

SymbolService::~SymbolService() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

SymbolService::Lookup SymbolService::lookup(const ModuleRef& module, uint64_t file_offset) {
  std::string key = address_key(module, file_offset);
  std::lock_guard<std::mutex> lk(mu_);
  auto it = results_.find(key);
  if (it != results_.end()) return {it->second.frames, it->second.provisional, it->second.missing};
  if (queue_.size() >= options_.max_queue) {
    ++counters_.requests_dropped;
    return {};
  }
  results_.emplace(key, Entry{});
  queue_.push_back({std::move(key), module, file_offset});
  ++counters_.requests;
  wake_.notify_one();
  return {};
}

SymbolCounters SymbolService::counters() const {
  std::lock_guard<std::mutex> lk(mu_);
  SymbolCounters c = counters_;
  c.queue_depth = queue_.size();
  c.cached_results = result_order_.size();
  return c;
}

bool SymbolService::wait_idle(std::chrono::milliseconds timeout, bool fetches) {
  std::unique_lock<std::mutex> lk(mu_);
  return idle_.wait_for(lk, timeout, [&] {
    return queue_.empty() && !busy_ && (!fetches || fetches_busy_ == 0);
  });
}

void SymbolService::run() {
  std::vector<Request> batch;
  for (;;) {
    {
      std::unique_lock<std::mutex> lk(mu_);
      busy_ = false;
      idle_.notify_all();
      auto ready = [&] { return stop_ || !queue_.empty(); };
      if (fetches_busy_ > 0) wake_.wait_for(lk, kFetchPoll, ready);
      else wake_.wait(lk, ready);
      if (stop_) return;
      batch.clear();
      while (!queue_.empty() && batch.size() < kBatch) {
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      busy_ = !batch.empty();
    }
    resolve_batch(batch);
    for (const DebuginfodFetcher::Outcome& o : fetcher_->poll()) fetched(o.build_id, o.ok);
    std::lock_guard<std::mutex> lk(mu_);
    fetches_busy_ = fetcher_->busy();
    counters_.symbolizer = symbolizer_->stats();
    counters_.debuginfod = fetcher_->counters();
  }
}

void SymbolService::resolve_batch(std::vector<Request>& batch) {
  if (batch.empty()) return;
  struct Done {
    std::string key;
    Entry entry;
  };
  std::vector<Done> done;
  done.reserve(batch.size());
  for (Request& r : batch) {
    Entry e;
    e.frames = std::make_shared<const std::vector<Frame>>(symbolizer_->symbolize_inline(r.module, r.offset));
    e.missing = why_unnamed(r.module, *e.frames);
    if (fetcher_->enabled()) {
      Symbolizer::ModuleInfo info = symbolizer_->module_info(r.module);
      if (info.opened && info.wants_debug_file && !info.build_id.empty() &&
          info.source != DebugSource::kDebuginfod && fetcher_->want(info.build_id)) {
        Known& k = known_[shared_module_key(r.module)];
        k.module = r.module;
        if (k.addresses.size() < options_.limits.max_cached_addresses_per_module) {
          k.addresses.emplace_back(r.key, r.offset);
          e.provisional = true;
        }
      }
    }
    done.push_back({std::move(r.key), std::move(e)});
  }
  std::lock_guard<std::mutex> lk(mu_);
  for (Done& d : done) {
    auto [it, inserted] = results_.insert_or_assign(d.key, std::move(d.entry));
    (void)inserted;
    result_order_.push_back(it->first);
    ++counters_.resolved;
  }
  while (result_order_.size() > std::max<size_t>(options_.max_results, 1)) {
    auto it = results_.find(result_order_.front());
    if (it != results_.end() && it->second.frames != nullptr) {
      results_.erase(it);
      ++counters_.results_evicted;
    }
    result_order_.pop_front();
  }
  generation_.fetch_add(1, std::memory_order_acq_rel);
}

// The module could not be opened (its file gone or replaced since the
// process mapped it), or it has no symbols at all: said, not left as a
// bare offset. An address outside every symbol of a module that has them
// is not a reason the reader can act on.
const char* SymbolService::why_unnamed(const ModuleRef& module, const std::vector<Frame>& frames) {
  for (const Frame& f : frames)
    if (!f.function.empty()) return "";
  Symbolizer::ModuleInfo info = symbolizer_->module_info(module);
  if (!info.opened) return info.failure;
  return info.source == DebugSource::kNone ? kSymbolsNoSymbols : "";
}

// A fetch ended: with the file, the module is opened again (the cache is
// one of the places searched) and its addresses resolved again; without
// it, what they have is final.
void SymbolService::fetched(const std::string& build_id, bool ok) {
  // One fetch serves every file with the build-id; each is its own module.
  for (auto it = known_.begin(); it != known_.end();) {
    if (it->second.module.build_id != build_id) {
      ++it;
      continue;
    }
    Known k = std::move(it->second);
    it = known_.erase(it);
    refetched(k, ok);
  }
}

void SymbolService::refetched(Known& k, bool ok) {
  std::vector<std::pair<std::string, Frames>> done;
  if (ok) {
    symbolizer_->forget(k.module);
    for (const auto& [key, offset] : k.addresses) {
      done.emplace_back(key, std::make_shared<const std::vector<Frame>>(
                                 symbolizer_->symbolize_inline(k.module, offset)));
    }
  } else {
    for (const auto& [key, offset] : k.addresses) done.emplace_back(key, nullptr);
  }
  // The module was just opened again: no file read here, and none under the lock.
  std::unordered_map<std::string, const char*> missing;
  for (const auto& [key, frames] : done)
    if (frames != nullptr) missing[key] = why_unnamed(k.module, *frames);
  std::lock_guard<std::mutex> lk(mu_);
  for (auto& [key, frames] : done) {
    // Replaced in place: an address evicted meanwhile is not brought back.
    auto r = results_.find(key);
    if (r == results_.end() || r->second.frames == nullptr) continue;
    if (frames != nullptr) {
      r->second.missing = missing[key];
      r->second.frames = std::move(frames);
      ++counters_.resolved;
    }
    r->second.provisional = false;
  }
  generation_.fetch_add(1, std::memory_order_acq_rel);
}

}  // namespace lw
