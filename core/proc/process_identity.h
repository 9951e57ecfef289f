/* SPDX-License-Identifier: Apache-2.0 */
// Who a process is, for labels: systemd unit, Kubernetes pod and container,
// from /proc and the kubelet's log directory, without an API server.
//
// Pure parsers (parse_*) are exposed for tests; read_process_identity() and
// PodDirectory touch the file system with bounded reads.
// The strings are raw kernel/kubelet text: pass them through
// sanitize_label_value() (label_sanitize.h) before exporting them.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "core/platform/result.h"

namespace lw {

// --- /proc/PID/cgroup -------------------------------------------------------

// The cgroup path of a process from the text of /proc/PID/cgroup.
// Pure cgroup2 has one line "0::/path". Hybrid hosts have v1 lines
// "ID:controller[,controller]:/path" plus "0::/path" for the unified
// hierarchy. Preference: the v2 path, then name=systemd, then memory; a root
// path "/" loses to a deeper one from the next choice, because on hybrid
// hosts whose container runtime only manages v1 controllers the v2 line
// stays "0::/" while memory carries the container's cgroup.
// A " (deleted)" suffix (the kernel's mark for a removed v2 cgroup) is
// stripped. nullopt when no line is usable.
std::optional<std::string> parse_proc_cgroup(std::string_view text);

// What a cgroup path says about its processes. Fields are set only when the
// path says it unambiguously.
struct CgroupIdentity {
  // systemd unit: the last path component naming a unit that can hold
  // processes (.service, .scope, .socket, .mount, .swap), with systemd's
  // '_' escape removed, e.g. "model-server.service", "session-3.scope",
  // "cri-containerd-<id>.scope".
  std::optional<std::string> unit;
  // Pod UID as kube_pod_info{uid} spells it: dashes, never the systemd
  // driver's underscores. Static pods have a 32-hex-digit UID.
  std::optional<std::string> pod_uid;
  // As kube_pod_container_info{container_id} spells it:
  // "containerd://<64 hex>", "cri-o://<64 hex>", "docker://<64 hex>".
  std::optional<std::string> container_id;
};

// The runtime a bare "<64 hex>" container cgroup (cgroupfs driver) belongs
// to. The path cannot tell: containerd and cri-dockerd both use the bare ID
// (CRI-O writes "crio-<id>"). containerd is the default runtime since
// Kubernetes 1.24 removed dockershim.
inline constexpr std::string_view kDefaultBareContainerRuntime = "containerd";

// Derives unit, pod UID and container ID from a cgroup path. Understands the
// kubelet's systemd driver ("/kubepods.slice/kubepods-burstable.slice/
// kubepods-burstable-pod<uid_with_underscores>.slice/cri-containerd-<id>.scope")
// and cgroupfs driver ("/kubepods/besteffort/pod<uid>/<id>"), all QoS classes
// (guaranteed pods sit directly under kubepods), containerd, CRI-O and
// Docker, plus plain Docker ("/docker/<id>", "docker-<id>.scope"). Leading
// "/.." components (paths seen from another cgroup namespace) are harmless.
// `bare_container_runtime` names the scheme for bare IDs under kubepods.
CgroupIdentity parse_cgroup_path(
    std::string_view path, std::string_view bare_container_runtime = kDefaultBareContainerRuntime);

// --- /proc/PID/stat ---------------------------------------------------------

struct StatFields {
  char state = 0;           // field 3: R, S, D, Z, X, ...
  uint64_t flags = 0;       // field 9: PF_* task flags
  uint64_t utime = 0;       // field 14: clock ticks in user mode
  uint64_t stime = 0;       // field 15: clock ticks in kernel mode
  uint64_t num_threads = 0; // field 20
  uint64_t start_time = 0;  // field 22: clock ticks after boot
  uint64_t vsize = 0;       // field 23: bytes
  uint64_t rss_pages = 0;   // field 24
};

// Parses the fields after comm. comm (field 2) is "(name)" and the name may
// hold spaces and ')', so fields are counted after the LAST ')'.
Result<StatFields> parse_proc_stat(std::string_view text);

// --- /var/log/pods ----------------------------------------------------------

struct PodRef {
  std::string pod_namespace;
  std::string pod_name;
};

struct PodLogDir {
  PodRef pod;
  std::string uid;
};

// Parses a kubelet pod log directory name "<namespace>_<pod>_<uid>".
// Namespace (DNS label) and pod (DNS subdomain) cannot contain '_'; the UID
// is a UUID or a static pod's 32-hex-digit hash. nullopt for anything else.
std::optional<PodLogDir> parse_pod_log_dir_name(std::string_view name);

struct PodDirectoryOptions {
  std::string root = "/var/log/pods";
  // A lookup after this long rescans, so deleted pods age out.
  std::chrono::seconds max_age{60};
  // A lookup miss rescans (the pod may be newer than the last scan), but not
  // more often than this: a process whose pod has no log directory must not
  // turn every lookup into a directory scan.
  std::chrono::milliseconds min_rescan_interval{1000};
  // Entries beyond this are ignored (bounds memory on a hostile root).
  size_t max_entries = 100000;
};

// Pod UID -> (namespace, pod name), from the kubelet's log directory names.
// Thread-safety: thread-safe (one mutex; a scan runs under it).
class PodDirectory {
 public:
  using Clock = std::chrono::steady_clock;

  explicit PodDirectory(PodDirectoryOptions options = {});

  // The pod with this UID. Rescans first when the data is older than
  // max_age, or on a miss when the last scan is older than
  // min_rescan_interval. A failed scan keeps the previous data.
  std::optional<PodRef> lookup(std::string_view uid) { return lookup(uid, Clock::now()); }
  // The same at a given time (tests drive the clock).
  std::optional<PodRef> lookup(std::string_view uid, Clock::time_point now);

  // Rescans now. Errors (root missing or unreadable) are for the operator;
  // lookup() swallows them. The previous data stays on error.
  Status refresh();

  size_t size() const;

 private:
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  using Map = std::unordered_map<std::string, PodRef, StringHash, std::equal_to<>>;

  Status scan_locked(Clock::time_point now);

  const PodDirectoryOptions options_;
  mutable std::mutex mu_;
  Map by_uid_;
  std::optional<Clock::time_point> last_scan_;  // nullopt: never scanned
};

// --- a live process ---------------------------------------------------------

struct ProcessIdentity {
  pid_t pid = 0;
  // With pid, identifies the process across pid reuse.
  uint64_t start_time = 0;  // clock ticks after boot (/proc/PID/stat field 22)
  std::string comm;         // /proc/PID/comm, no newline
  // readlink /proc/PID/exe with " (deleted)" stripped. "" for kernel
  // threads, which have none.
  std::string exe;
  bool exe_deleted = false;           // the executable was deleted or replaced on disk
  std::optional<std::string> cgroup;  // see parse_proc_cgroup()
  std::optional<std::string> unit;
  std::optional<std::string> pod_uid;
  std::optional<std::string> container_id;
  std::optional<std::string> pod_namespace;  // from PodDirectory
  std::optional<std::string> pod_name;       // from PodDirectory
  // Whose process it is, for per-user budgets (issue 32): the owner of
  // /proc/PID (the effective uid), or, when that is root, the real uid of
  // /proc/PID/status "Uid:" (a process that made itself non-dumpable has a
  // root-owned /proc/PID, and must not pass for root). nullopt: unread.
  std::optional<uint32_t> real_uid;
};

// The real uid of a /proc/PID/status text (the "Uid:" line's first field).
std::optional<uint32_t> parse_status_real_uid(std::string_view status);

// Reads the identity of a live process. All files are read through one
// /proc/PID directory fd, so a pid reused mid-read fails instead of mixing
// two processes. A process that is gone or a zombie gives Error{ESRCH}.
// `pods` may be null (no namespace and pod name then).
Result<ProcessIdentity> read_process_identity(pid_t pid, PodDirectory* pods);

}  // namespace lw
