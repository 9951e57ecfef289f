// SPDX-License-Identifier: Apache-2.0
// The unwind tables of every object a traced process maps
// (decision cfi-unwinding): each executable file mapping is
// registered in the kernel's unwind_objs map as pending, its call-frame
// information is compiled into rows (core/unwind/unwind_table.h) on a worker
// thread, off the attach path, and loaded into BPF array maps; until then
// the BPF unwinder falls back to frame pointers and marks the stack
// `table_pending`. A table is built once per (build-id, CFI identity) and
// shared by every object (inode) and process whose file has that build-id
// and compiles to that table (cfi_identity(), decision file-identity: a
// build-id alone is what a file says, not what it is); built tables are
// cached on disk under unwind.cache_dir, named and checked by both, so a
// restart does not build them again. The
// tables loaded at once are bounded by unwind.max_table_bytes: an object
// whose table does not fit is marked so (`memory_budget`) and unwound with
// frame pointers.
//
// Thread-safety: add_process(), remove_process(), stats() and wait_idle()
// may be called from any thread (one mutex); the worker thread builds and
// loads tables. The BpfSession must outlive this object.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/platform/fd.h"
#include "core/platform/result.h"
#include "core/symbols/elf_file.h"
#include "core/symbols/overlay.h"
#include "core/unwind/unwind_table.h"
#include "core/proc/proc_maps.h"
#include "engine/bpf_session.h"
#include "view/process_view.h"

namespace lw {

struct UnwindTableOptions {
  // Loaded tables, rows and page indexes together, at most this many bytes
  // (kernel memory, charged to the daemon's memory cgroup).
  uint64_t max_table_bytes = 128ull << 20;
  // Built tables are kept here by build-id and identity ("" = no disk cache), within
  // cache_max_bytes (files written past it are not kept).
  std::string cache_dir;
  uint64_t cache_max_bytes = 1ull << 30;
  // Fault testing only (`top --debug-slow-tables-ms`): each job waits this
  // long before it is built or loaded, as a cold 120 MB library would.
  uint32_t debug_job_delay_ms = 0;
};

inline constexpr const char* kDefaultUnwindCacheDir = "/var/cache/leakwatch/unwind";

// `top` and `snapshot`: `cache_dir` when given (--unwind-cache-dir; "":
// no disk cache), else the daemon's default cache directory when it can be
// created (root), else no disk cache. The choice is logged at info, so the
// command never writes there without saying so (issue 35, item 13).
UnwindTableOptions default_unwind_options(const std::optional<std::string>& cache_dir = std::nullopt);

class UnwindTables {
 public:
  UnwindTables(BpfSession& session, UnwindTableOptions options);
  ~UnwindTables();  // stops the worker; loaded tables stay with the session

  // Makes `pid`'s objects exactly the executable file mappings of `maps`
  // (attach, exec, dlopen/dlclose rescans): new objects are registered
  // (pending) and queued, objects the process no longer maps are released.
  void add_process(pid_t pid, const ParsedMaps& maps);
  // The process is gone: its objects are released (an object no traced
  // process maps any more leaves the kernel maps; its table goes once no
  // object uses it).
  void remove_process(pid_t pid);

  // The identities /proc/PID/maps shows for an object the BPF side saw as
  // (dev, ino): a file mapped from overlayfs is seen by the kernel as its
  // layer file (core/symbols/overlay.h), and is registered under both. Empty when
  // (dev, ino) is no such layer file.
  std::vector<std::pair<uint32_t, uint64_t>> user_identities(uint32_t dev, uint64_t ino) const;

  UnwindStats stats() const;
  // Waits until no object is queued or being built (tests; `snapshot`).
  bool wait_idle(std::chrono::milliseconds timeout);

  UnwindTables(const UnwindTables&) = delete;
  UnwindTables& operator=(const UnwindTables&) = delete;

 private:
  using ObjectKey = std::pair<uint32_t, uint64_t>;  // (kernel device, inode)
  struct Object {
    std::set<pid_t> users;
    uint32_t state = LW_TABLE_PENDING;
    std::string table_key;  // tables_ key once ready
    // The layer file's identity when mapped from overlayfs (the BPF side
    // sees that one): registered in the kernel map too.
    std::optional<ObjectKey> backing;
  };
  struct Table {
    uint32_t slot = 0;
    uint64_t bytes = 0;
    std::set<ObjectKey> objects;
    uint32_t nrows = 0, npages = 0;
  };
  struct Job {
    ObjectKey key;
    Fd fd;
    std::string path;  // for messages
    // The layer file when mapped from overlayfs: tied to the object once
    // its build-id is the object's.
    std::optional<OverlayBacking> backing;
  };

  void worker();
  // A queued object's table: from memory (another inode with its build-id),
  // the disk cache or its call-frame information, then loaded into the
  // kernel; the object's state set.
  void process_job(Job& job);
  // The overlay layer file tied to the job's object: only one with the
  // same CFI identity.
  static std::optional<ObjectKey> verified_backing(const Job& job, const std::string& identity);
  // Ties the backing and takes a table already loaded under `table_key`;
  // true when that settled the object (ready, gone, or no ELF to build from).
  bool settle_from_memory(const Job& job, const std::optional<ObjectKey>& backing,
                          const std::string& table_key, bool have_elf);
  // Read back from the disk cache (`from_disk`), else built, and written to
  // the cache. Without the lock: libtorch_cpu takes seconds.
  Result<UnwindTable> obtain_table(const Result<CfiInput>& input, const std::string& build_id,
                                   const std::string& identity, bool& from_disk);
  // Loads `table` into a free slot and marks the object ready, or marks
  // why not.
  void install_table(const Job& job, const std::string& table_key, const Result<UnwindTable>& table,
                     bool from_disk);
  void load_into_slot(std::unique_lock<std::mutex>& lock, const Job& job, const std::string& table_key,
                      const UnwindTable& table);
  void release_locked(const ObjectKey& key, pid_t pid);
  void set_state_locked(const ObjectKey& key, Object& o, uint32_t state, const Table* table);

  BpfSession& session_;
  UnwindTableOptions options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::condition_variable idle_cv_;
  std::map<ObjectKey, Object> objects_;
  // Layer file -> the overlay objects backed by it (containers from one
  // image share their layers' files).
  std::map<ObjectKey, std::set<ObjectKey>> backed_;
  std::map<pid_t, std::set<ObjectKey>> by_pid_;
  std::map<std::string, Table> tables_;  // by "build-id:identity" ("inode:dev:ino" without)
  std::vector<uint32_t> free_slots_;
  std::deque<Job> queue_;
  bool busy_ = false;
  bool stop_ = false;
  UnwindStats stats_;
  std::thread thread_;
};

}  // namespace lw
