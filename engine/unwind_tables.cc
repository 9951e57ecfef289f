// SPDX-License-Identifier: Apache-2.0
#include "engine/unwind_tables.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <thread>

#include "core/symbols/elf_file.h"
#include "core/platform/log.h"
#include "core/proc/procfs.h"
#include "core/symbols/stack_frames.h"
#include "core/unwind/unwind_cache.h"
#include "core/unwind/unwind_table.h"

namespace lw {

namespace {

lw_obj_key obj_key(uint32_t dev, uint64_t ino) {
  lw_obj_key k{};
  k.ino = ino;
  k.dev = dev;
  return k;
}

bool lower_hex(const std::string& s) {
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

// The cache file of a table: named by build-id and content identity
// (decision file-identity), so that two files claiming one build-id have
// two files here instead of overwriting each other's; "" when there is no
// cache. Both are hex from our own readers; anything else is not used as a
// file name.
std::string cache_path(const std::string& dir, const std::string& build_id, const std::string& identity) {
  if (dir.empty() || build_id.empty() || build_id.size() > 128 || identity.empty() || identity.size() > 64)
    return "";
  if (!lower_hex(build_id) || !lower_hex(identity)) return "";
  return dir + "/" + build_id + "-" + identity + ".lwut";
}

uint64_t dir_bytes(const std::string& dir) {
  std::error_code ec;
  uint64_t total = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (ec) break;
    if (e.is_regular_file(ec)) total += e.file_size(ec);
  }
  return total;
}

// Writes `bytes` to `path` through a temporary file and a rename, so a
// reader never sees half a table (the parser would refuse it anyway).
bool write_atomically(const std::string& path, const std::string& bytes) {
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  Fd fd(open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd.valid()) return false;
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = write(fd.get(), bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      unlink(tmp.c_str());
      return false;
    }
    done += static_cast<size_t>(n);
  }
  if (fsync(fd.get()) != 0 || rename(tmp.c_str(), path.c_str()) != 0) {
    unlink(tmp.c_str());
    return false;
  }
  return true;
}

}  // namespace

UnwindTableOptions default_unwind_options(const std::optional<std::string>& cache_dir) {
  UnwindTableOptions o;
  std::error_code ec;
  if (cache_dir) {
    o.cache_dir = *cache_dir;
  } else if (geteuid() == 0 && (std::filesystem::create_directories(kDefaultUnwindCacheDir, ec), !ec)) {
    o.cache_dir = kDefaultUnwindCacheDir;
  }
  return o;
}

UnwindTables::UnwindTables(BpfSession& session, UnwindTableOptions options)
    : session_(session), options_(std::move(options)) {
  stats_.max_table_bytes = options_.max_table_bytes;
  for (uint32_t slot = session_.max_unwind_tables(); slot > 0; --slot) free_slots_.push_back(slot - 1);
  // Said once the BPF side is loaded (a start that fails says only why).
  if (options_.cache_dir.empty())
    LW_LOG_INFO("unwind tables: no disk cache (top, snapshot: --unwind-cache-dir DIR keeps them across runs; "
                "the daemon: unwind.cache_dir)");
  else
    LW_LOG_INFO("unwind tables: cached in %s (top, snapshot: --unwind-cache-dir DIR moves it, '' turns it off; "
                "the daemon: unwind.cache_dir)",
                options_.cache_dir.c_str());
  if (!options_.cache_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(options_.cache_dir, ec);
    if (ec) {
      LW_LOG_WARN("unwind table cache %s: %s: tables are built at every start",
                  options_.cache_dir.c_str(), ec.message().c_str());
      options_.cache_dir.clear();
    }
  }
  thread_ = std::thread([this] { worker(); });
}

UnwindTables::~UnwindTables() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void UnwindTables::add_process(pid_t pid, const ParsedMaps& maps) {
  std::map<ObjectKey, const MapEntry*> now;
  for (const MapEntry& m : maps.entries)
    if (m.is_file() && m.executable)
      now.emplace(ObjectKey{kernel_dev(m.dev_major, m.dev_minor), m.inode}, &m);
  bool queued = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::set<ObjectKey>& mine = by_pid_[pid];
    for (auto it = mine.begin(); it != mine.end();) {
      if (now.count(*it)) {
        ++it;
        continue;
      }
      release_locked(*it, pid);
      it = mine.erase(it);
    }
    for (const auto& [key, m] : now) {
      if (!mine.insert(key).second) continue;
      auto [it, fresh] = objects_.try_emplace(key);
      it->second.users.insert(pid);
      if (!fresh) continue;
      ++stats_.objects;
      ++stats_.objects_pending;
      (void)session_.set_unwind_object(obj_key(key.first, key.second), lw_unwind_obj{LW_TABLE_PENDING, 0, 0, 0});
      // Opened now, while the mapping exists: the process may be gone
      // by the time the worker reaches it.
      Result<int> fd = open_mapped_file(pid, *m);
      if (!fd) {
        LW_LOG_DEBUG("unwind table for %s: %s", m->path.c_str(), fd.error().message.c_str());
        ++stats_.build_failures;
        set_state_locked(key, it->second, LW_TABLE_NO_CFI, nullptr);
        continue;
      }
      // A file mapped from overlayfs is its layer file to the BPF side.
      std::optional<OverlayBacking> backing = overlay_backing_file(pid, *m, *fd);
      queue_.push_back(Job{key, Fd(*fd), m->path, std::move(backing)});
      queued = true;
    }
    stats_.queue_depth = queue_.size();
  }
  if (queued) cv_.notify_one();
}

void UnwindTables::remove_process(pid_t pid) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_pid_.find(pid);
  if (it == by_pid_.end()) return;
  for (const ObjectKey& key : it->second) release_locked(key, pid);
  by_pid_.erase(it);
}

void UnwindTables::release_locked(const ObjectKey& key, pid_t pid) {
  auto it = objects_.find(key);
  if (it == objects_.end()) return;
  it->second.users.erase(pid);
  if (!it->second.users.empty()) return;
  // A layer file is also an object of its own when a process maps it
  // directly: its kernel entry stays while either use remains.
  if (!backed_.count(key)) (void)session_.remove_unwind_object(obj_key(key.first, key.second));
  Object& o = it->second;
  if (o.backing) {
    auto b = backed_.find(*o.backing);
    if (b != backed_.end()) {
      b->second.erase(key);
      if (b->second.empty()) {
        backed_.erase(b);
        if (!objects_.count(*o.backing))
          (void)session_.remove_unwind_object(obj_key(o.backing->first, o.backing->second));
      }
    }
  }
  switch (o.state) {
    case LW_TABLE_PENDING: --stats_.objects_pending; break;
    case LW_TABLE_READY: --stats_.objects_ready; break;
    case LW_TABLE_NO_CFI: --stats_.objects_no_cfi; break;
    case LW_TABLE_BUDGET: --stats_.objects_budget; break;
  }
  --stats_.objects;
  if (!o.table_key.empty()) {
    auto t = tables_.find(o.table_key);
    if (t != tables_.end()) {
      t->second.objects.erase(key);
      if (t->second.objects.empty()) {
        (void)session_.remove_unwind_table(t->second.slot);
        free_slots_.push_back(t->second.slot);
        stats_.table_bytes -= t->second.bytes;
        --stats_.tables;
        tables_.erase(t);
      }
    }
  }
  objects_.erase(it);
}

void UnwindTables::set_state_locked(const ObjectKey& key, Object& o, uint32_t state,
                                    const Table* table) {
  auto counter = [&](uint32_t s) -> uint64_t& {
    switch (s) {
      case LW_TABLE_READY: return stats_.objects_ready;
      case LW_TABLE_NO_CFI: return stats_.objects_no_cfi;
      case LW_TABLE_BUDGET: return stats_.objects_budget;
    }
    return stats_.objects_pending;
  };
  --counter(o.state);
  ++counter(state);
  o.state = state;
  lw_unwind_obj v{state, 0, 0, 0};
  if (table) {
    v.table = table->slot;
    v.nrows = table->nrows;
    v.npages = table->npages;
  }
  (void)session_.set_unwind_object(obj_key(key.first, key.second), v);
  // The same file's table under the identity the BPF side sees.
  if (o.backing) (void)session_.set_unwind_object(obj_key(o.backing->first, o.backing->second), v);
}

std::vector<std::pair<uint32_t, uint64_t>> UnwindTables::user_identities(uint32_t dev, uint64_t ino) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = backed_.find(ObjectKey{dev, ino});
  if (it == backed_.end()) return {};
  return {it->second.begin(), it->second.end()};
}

void UnwindTables::worker() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    Job job = std::move(queue_.front());
    queue_.pop_front();
    stats_.queue_depth = queue_.size();
    busy_ = true;
    lock.unlock();
    if (options_.debug_job_delay_ms > 0)
      std::this_thread::sleep_for(std::chrono::milliseconds(options_.debug_job_delay_ms));
    process_job(job);
    lock.lock();
    busy_ = false;
    if (queue_.empty()) idle_cv_.notify_all();
  }
}

void UnwindTables::process_job(Job& job) {
  Result<std::shared_ptr<const ElfFile>> elf = ElfFile::open_fd(job.fd.get(), job.path);
  const std::string build_id = elf ? (*elf)->build_id() : "";
  // Tables are shared by what the file's CFI is, not by the build-id it
  // claims (decision file-identity): anyone can link a copy of another
  // program's build-id into their own binary.
  const Result<CfiInput> input = elf ? read_cfi_input(**elf, nullptr) : Result<CfiInput>(elf.error());
  const std::string identity = input ? cfi_identity(*input) : "";
  const std::string table_key =
      build_id.empty() || identity.empty()
          ? "inode:" + std::to_string(job.key.first) + ":" + std::to_string(job.key.second)
          : build_id + ":" + identity;
  const std::optional<ObjectKey> backing = verified_backing(job, identity);
  if (settle_from_memory(job, backing, table_key, elf.ok())) return;
  bool from_disk = false;
  const Result<UnwindTable> table = obtain_table(input, build_id, identity, from_disk);
  install_table(job, table_key, table, from_disk);
}

std::optional<UnwindTables::ObjectKey> UnwindTables::verified_backing(const Job& job, const std::string& identity) {
  // Whoever mounted the overlay named its layers: the layer file is taken
  // for this object only with the same CFI identity (so the same table),
  // never a file that merely sits at that path or claims the build-id.
  std::optional<ObjectKey> backing;
  if (!job.backing || identity.empty()) return backing;
  if (Result<int> fd = open_untrusted_file(job.backing->path)) {
    Fd layer(*fd);
    struct stat st;
    if (fstat(layer.get(), &st) == 0 && st.st_ino == job.backing->ino &&
        kernel_dev(major(st.st_dev), minor(st.st_dev)) == job.backing->dev) {
      Result<std::shared_ptr<const ElfFile>> layer_elf = ElfFile::open_fd(layer.get(), job.backing->path);
      Result<CfiInput> layer_cfi =
          layer_elf ? read_cfi_input(**layer_elf, nullptr) : Result<CfiInput>(layer_elf.error());
      if (layer_cfi && cfi_identity(*layer_cfi) == identity)
        backing = ObjectKey{job.backing->dev, job.backing->ino};
    }
  }
  if (!backing) LW_LOG_DEBUG("unwind table for %s: layer file %s not taken", job.path.c_str(), job.backing->path.c_str());
  return backing;
}

bool UnwindTables::settle_from_memory(const Job& job, const std::optional<ObjectKey>& backing,
                                      const std::string& table_key, bool have_elf) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = objects_.find(job.key);
  if (it == objects_.end()) return true;  // released meanwhile
  if (backing && !it->second.backing) {
    it->second.backing = backing;
    backed_[*backing].insert(job.key);
  }
  if (auto t = tables_.find(table_key); t != tables_.end()) {
    ++stats_.memory_cache_hits;
    t->second.objects.insert(job.key);
    it->second.table_key = table_key;
    set_state_locked(job.key, it->second, LW_TABLE_READY, &t->second);
    return true;
  }
  if (!have_elf) {
    ++stats_.build_failures;
    set_state_locked(job.key, it->second, LW_TABLE_NO_CFI, nullptr);
    return true;
  }
  return false;
}

Result<UnwindTable> UnwindTables::obtain_table(const Result<CfiInput>& input, const std::string& build_id,
                                               const std::string& identity, bool& from_disk) {
  from_disk = false;
  if (!input) return input.error();
  Result<UnwindTable> table = Error{ENOENT, "not built"};
  const std::string cached = cache_path(options_.cache_dir, build_id, identity);
  if (!cached.empty()) {
    // A cache file is ours, but it is still checked (size, checksum,
    // build-id, identity, then the table itself) before it is loaded into
    // the kernel.
    if (Result<std::string> bytes = read_regular_file(cached, 512ull << 20)) {
      table = parse_cached_table(*bytes, build_id, identity);
      from_disk = table.ok();
      if (!table && table.error().code == ESTALE) {
        std::lock_guard<std::mutex> lock(mu_);
        ++stats_.disk_cache_mismatches;
      }
      if (!table) LW_LOG_WARN("unwind table cache %s: %s", cached.c_str(), table.error().message.c_str());
    }
  }
  if (!from_disk) {
    const auto t0 = std::chrono::steady_clock::now();
    table = build_unwind_table(*input);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::lock_guard<std::mutex> lock(mu_);
    stats_.build_seconds += s;
    if (table) ++stats_.builds;
  }
  if (table && !from_disk && !cached.empty() && dir_bytes(options_.cache_dir) < options_.cache_max_bytes) {
    std::string bytes = serialize(*table, build_id, identity);
    if (!bytes.empty() && !write_atomically(cached, bytes))
      LW_LOG_DEBUG("unwind table cache: cannot write %s", cached.c_str());
    // A format-1 file of this build-id (named by build-id alone) is never
    // read again.
    unlink((options_.cache_dir + "/" + build_id + ".lwut").c_str());
  }
  return table;
}

void UnwindTables::install_table(const Job& job, const std::string& table_key, const Result<UnwindTable>& table,
                                 bool from_disk) {
  std::unique_lock<std::mutex> lock(mu_);
  if (from_disk) ++stats_.disk_cache_hits;
  auto it = objects_.find(job.key);
  if (it == objects_.end()) return;
  if (!table) {
    if (table.error().code != ENOENT) {
      ++stats_.build_failures;
      LW_LOG_INFO("unwind table for %s: %s: frame pointers only", job.path.c_str(),
                  table.error().message.c_str());
    }
    set_state_locked(job.key, it->second, LW_TABLE_NO_CFI, nullptr);
    return;
  }
  // No FDE at all (a data-only library such as libicudata, a stub such as
  // libtorch.so): no CFI, like an object without .eh_frame, not a failure.
  if (table->rows.empty() || table->pages.empty()) {
    set_state_locked(job.key, it->second, LW_TABLE_NO_CFI, nullptr);
    return;
  }
  if (auto t = tables_.find(table_key); t != tables_.end()) {  // loaded meanwhile for another inode
    t->second.objects.insert(job.key);
    it->second.table_key = table_key;
    set_state_locked(job.key, it->second, LW_TABLE_READY, &t->second);
    return;
  }
  load_into_slot(lock, job, table_key, *table);
}

void UnwindTables::load_into_slot(std::unique_lock<std::mutex>& lock, const Job& job, const std::string& table_key,
                                  const UnwindTable& table) {
  auto it = objects_.find(job.key);
  const uint64_t bytes = table.bytes();
  if (stats_.table_bytes + bytes > options_.max_table_bytes || free_slots_.empty()) {
    LW_LOG_INFO("unwind table for %s (%llu bytes) refused: unwind.max_table_bytes (%llu) or the "
                "table slots are in use: frame pointers only",
                job.path.c_str(), static_cast<unsigned long long>(bytes),
                static_cast<unsigned long long>(options_.max_table_bytes));
    set_state_locked(job.key, it->second, LW_TABLE_BUDGET, nullptr);
    return;
  }
  Table entry;
  entry.slot = free_slots_.back();
  free_slots_.pop_back();
  entry.bytes = bytes;
  entry.nrows = static_cast<uint32_t>(table.rows.size());
  entry.npages = static_cast<uint32_t>(table.pages.size());
  stats_.table_bytes += bytes;
  lock.unlock();
  Status loaded = session_.load_unwind_table(entry.slot, table.rows, table.pages);
  lock.lock();
  it = objects_.find(job.key);
  if (!loaded || it == objects_.end()) {
    if (!loaded) {
      ++stats_.build_failures;
      LW_LOG_WARN("loading the unwind table of %s: %s", job.path.c_str(), loaded.error().message.c_str());
    }
    (void)session_.remove_unwind_table(entry.slot);
    free_slots_.push_back(entry.slot);
    stats_.table_bytes -= bytes;
    if (it != objects_.end()) set_state_locked(job.key, it->second, LW_TABLE_NO_CFI, nullptr);
    return;
  }
  entry.objects.insert(job.key);
  it->second.table_key = table_key;
  Table& stored = tables_.emplace(table_key, std::move(entry)).first->second;
  ++stats_.tables;
  set_state_locked(job.key, it->second, LW_TABLE_READY, &stored);
}

UnwindStats UnwindTables::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

bool UnwindTables::wait_idle(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return idle_cv_.wait_for(lock, timeout, [&] { return queue_.empty() && !busy_; });
}

}  // namespace lw
