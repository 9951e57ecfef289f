// SPDX-License-Identifier: Apache-2.0
#include "core/proc/process_identity.h"

#include "core/platform/fd.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <vector>

namespace lw {

namespace {

constexpr std::string_view kDeletedSuffix = " (deleted)";

// Kernel task flag (include/linux/sched.h), visible in /proc/PID/stat.
constexpr uint64_t kPfKthread = 0x00200000;

// Bounds for /proc reads. stat is ~52 numbers and a comm of at most 64
// bytes; comm itself is at most 64 bytes even for workqueue workers; the
// cgroup file has one line per hierarchy (about 15) of at most PATH_MAX.
constexpr size_t kMaxStatBytes = 4096;
constexpr size_t kMaxCommBytes = 256;
constexpr size_t kMaxCgroupBytes = 64 << 10;
// The kernel builds the exe link target in one page.
constexpr size_t kMaxExeBytes = 8192;

// Splits on `sep`, skipping empty pieces.
std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  while (!s.empty()) {
    const size_t at = s.find(sep);
    std::string_view piece = s.substr(0, at);
    if (!piece.empty()) out.push_back(piece);
    s.remove_prefix(at == std::string_view::npos ? s.size() : at + 1);
  }
  return out;
}

bool is_hex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

bool all_hex(std::string_view s) {
  for (char c : s) {
    if (!is_hex(c)) return false;
  }
  return !s.empty();
}

// Runtimes write 64-hex-digit container IDs; requiring exactly that keeps
// names like "docker-compose.scope" from passing as containers.
bool is_container_hex(std::string_view s) { return s.size() == 64 && all_hex(s); }

// A UUID (8-4-4-4-12) as the API server assigns, or the 32-hex-digit hash
// the kubelet uses as the UID of a static pod.
bool is_pod_uid(std::string_view s) {
  if (s.size() == 32) return all_hex(s);
  if (s.size() != 36) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const bool dash_slot = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash_slot ? s[i] != '-' : !is_hex(s[i])) return false;
  }
  return true;
}

std::optional<std::string> strip_prefix_suffix(std::string_view s, std::string_view prefix,
                                               std::string_view suffix) {
  if (s.size() < prefix.size() + suffix.size() || !s.starts_with(prefix) || !s.ends_with(suffix)) {
    return std::nullopt;
  }
  return std::string(s.substr(prefix.size(), s.size() - prefix.size() - suffix.size()));
}

// Unit types whose cgroups hold processes: services and scopes, plus the
// helpers sockets, mounts and swaps run (ExecStartPre=, mount(8), swapon).
bool is_process_unit(std::string_view c) {
  static constexpr std::array<std::string_view, 5> kSuffixes = {".service", ".scope", ".socket",
                                                                ".mount", ".swap"};
  for (std::string_view suf : kSuffixes) {
    if (c.size() > suf.size() && c.ends_with(suf)) return true;
  }
  return false;
}

// systemd prefixes '_' to unit cgroup names that would clash with kernel
// file names (cg_escape()); cg_unescape() drops one leading '_'.
std::string_view unescape_unit(std::string_view c) {
  if (c.starts_with('_')) c.remove_prefix(1);
  return c;
}

// The pod UID named by component i, or nullopt.
//  systemd driver: "kubepods-pod<uid>.slice", "kubepods-<qos>-pod<uid>.slice"
//    ('-' separates slice levels, so the UID's dashes are written as '_').
//  cgroupfs driver: "pod<uid>" under "kubepods" or "kubepods/<qos>".
std::optional<std::string> pod_uid_at(const std::vector<std::string_view>& parts, size_t i) {
  std::string_view c = parts[i];
  std::string uid;
  if (c.starts_with("kubepods-") && c.ends_with(".slice")) {
    c.remove_suffix(std::string_view(".slice").size());
    std::string_view last = c.substr(c.rfind('-') + 1);
    if (!last.starts_with("pod")) return std::nullopt;
    uid.assign(last.substr(3));
    for (char& ch : uid) {
      if (ch == '_') ch = '-';
    }
  } else if (c.starts_with("pod")) {
    const bool under_kubepods = (i >= 1 && parts[i - 1] == "kubepods") ||
                                (i >= 2 && parts[i - 2] == "kubepods" &&
                                 (parts[i - 1] == "besteffort" || parts[i - 1] == "burstable"));
    if (!under_kubepods) return std::nullopt;
    uid.assign(c.substr(3));
  } else {
    return std::nullopt;
  }
  if (!is_pod_uid(uid)) return std::nullopt;
  return uid;
}

// The container ID named by component i, with its runtime scheme, or nullopt.
std::optional<std::string> container_id_at(const std::vector<std::string_view>& parts, size_t i,
                                           bool under_pod, std::string_view bare_runtime) {
  struct Form {
    std::string_view prefix, suffix, scheme;
  };
  // systemd driver scopes, and CRI-O's cgroupfs directories.
  static constexpr std::array<Form, 4> kForms = {{
      {"cri-containerd-", ".scope", "containerd"},
      {"crio-", ".scope", "cri-o"},
      {"crio-", "", "cri-o"},
      {"docker-", ".scope", "docker"},
  }};
  const std::string_view c = parts[i];
  for (const Form& f : kForms) {
    std::optional<std::string> hex = strip_prefix_suffix(c, f.prefix, f.suffix);
    if (hex && is_container_hex(*hex)) return std::string(f.scheme) + "://" + *hex;
  }
  if (!is_container_hex(c)) return std::nullopt;
  // A bare ID: kubelet cgroupfs driver, or Docker's own "/docker/<id>".
  if (under_pod) return std::string(bare_runtime) + "://" + std::string(c);
  if (i >= 1 && parts[i - 1] == "docker") return "docker://" + std::string(c);
  return std::nullopt;
}

// --- reading /proc ---


// A pid's files vanish with ENOENT or ESRCH depending on how far its exit
// got (a held /proc/PID fd gives ESRCH); callers see one code for both.
Error proc_error(pid_t pid, std::string_view what, std::string_view file, int err) {
  if (err == ESRCH || err == ENOENT) {
    return Error{ESRCH, "process " + std::to_string(pid) + " exited"};
  }
  return errno_error(std::string(what) + " /proc/" + std::to_string(pid) + "/" + std::string(file),
                     err);
}

struct BoundedText {
  std::string text;
  bool truncated = false;  // the file had more than max_bytes
};

Result<BoundedText> read_bounded(int dirfd, pid_t pid, const char* file, size_t max_bytes) {
  Fd fd(openat(dirfd, file, O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return proc_error(pid, "open", file, errno);
  BoundedText out;
  // One byte past the limit tells a full file from a cut one.
  out.text.resize(max_bytes + 1);
  size_t len = 0;
  while (len < out.text.size()) {
    const ssize_t n = read(fd.get(), out.text.data() + len, out.text.size() - len);
    if (n < 0) {
      if (errno == EINTR) continue;
      return proc_error(pid, "read", file, errno);
    }
    if (n == 0) break;
    len += static_cast<size_t>(n);
  }
  out.truncated = len > max_bytes;
  out.text.resize(std::min(len, max_bytes));
  return out;
}

}  // namespace

std::optional<std::string> parse_proc_cgroup(std::string_view text) {
  std::optional<std::string_view> v2, systemd, memory;
  for (std::string_view line : split(text, '\n')) {
    // "ID:controllers:path"; the path is the rest and may itself hold ':'.
    const size_t c1 = line.find(':');
    if (c1 == std::string_view::npos) continue;
    const size_t c2 = line.find(':', c1 + 1);
    if (c2 == std::string_view::npos) continue;
    const std::string_view id = line.substr(0, c1);
    const std::string_view controllers = line.substr(c1 + 1, c2 - c1 - 1);
    std::string_view path = line.substr(c2 + 1);
    if (id.empty() || !path.starts_with('/')) continue;
    if (path.size() > kDeletedSuffix.size() && path.ends_with(kDeletedSuffix)) {
      path.remove_suffix(kDeletedSuffix.size());
    }
    if (id == "0" && controllers.empty()) {
      v2 = path;
      continue;
    }
    for (std::string_view ctl : split(controllers, ',')) {
      if (ctl == "name=systemd") systemd = path;
      if (ctl == "memory") memory = path;
    }
  }
  const std::array<std::optional<std::string_view>, 3> by_preference = {v2, systemd, memory};
  for (const auto& p : by_preference) {
    if (p && *p != "/") return std::string(*p);
  }
  for (const auto& p : by_preference) {
    if (p) return std::string(*p);
  }
  return std::nullopt;
}

CgroupIdentity parse_cgroup_path(std::string_view path, std::string_view bare_container_runtime) {
  CgroupIdentity id;
  const std::vector<std::string_view> parts = split(path, '/');
  // Deeper components win: a container sits below its pod, and a delegated
  // unit's sub-cgroups ("app.service/worker") below the unit.
  for (size_t i = 0; i < parts.size(); ++i) {
    if (is_process_unit(parts[i])) id.unit = std::string(unescape_unit(parts[i]));
    if (std::optional<std::string> uid = pod_uid_at(parts, i)) id.pod_uid = std::move(uid);
    if (std::optional<std::string> cid =
            container_id_at(parts, i, id.pod_uid.has_value(), bare_container_runtime)) {
      id.container_id = std::move(cid);
    }
  }
  return id;
}

Result<StatFields> parse_proc_stat(std::string_view text) {
  const size_t close_paren = text.rfind(')');
  if (close_paren == std::string_view::npos) return Error{EINVAL, "malformed stat: no comm"};
  // Fields 3.. follow the comm; index 0 here is field 3.
  constexpr size_t kStateIdx = 3 - 3, kFlagsIdx = 9 - 3, kUtimeIdx = 14 - 3, kStimeIdx = 15 - 3,
                   kThreadsIdx = 20 - 3, kStartTimeIdx = 22 - 3, kVsizeIdx = 23 - 3, kRssIdx = 24 - 3;
  std::string_view rest = text.substr(close_paren + 1);
  if (rest.ends_with('\n')) rest.remove_suffix(1);
  const std::vector<std::string_view> fields = split(rest, ' ');
  if (fields.size() <= kStartTimeIdx) return Error{EINVAL, "malformed stat: too few fields"};

  auto number = [](std::string_view s, uint64_t* out) {
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
    return ec == std::errc() && end == s.data() + s.size();
  };
  StatFields st;
  if (fields[kStateIdx].size() != 1) return Error{EINVAL, "malformed stat: state"};
  st.state = fields[kStateIdx][0];
  if (!number(fields[kFlagsIdx], &st.flags)) return Error{EINVAL, "malformed stat: flags"};
  if (!number(fields[kStartTimeIdx], &st.start_time)) {
    return Error{EINVAL, "malformed stat: starttime"};
  }
  // Later fields are optional for the callers that need only the identity
  // (tests feed truncated lines); a malformed one reads as 0.
  (void)number(fields[kUtimeIdx], &st.utime);
  (void)number(fields[kStimeIdx], &st.stime);
  (void)number(fields[kThreadsIdx], &st.num_threads);
  if (fields.size() > kRssIdx) {
    (void)number(fields[kVsizeIdx], &st.vsize);
    (void)number(fields[kRssIdx], &st.rss_pages);
  }
  return st;
}

std::optional<PodLogDir> parse_pod_log_dir_name(std::string_view name) {
  const size_t u1 = name.find('_');
  if (u1 == std::string_view::npos) return std::nullopt;
  const size_t u2 = name.find('_', u1 + 1);
  if (u2 == std::string_view::npos || name.find('_', u2 + 1) != std::string_view::npos) {
    return std::nullopt;
  }
  const std::string_view ns = name.substr(0, u1);
  const std::string_view pod = name.substr(u1 + 1, u2 - u1 - 1);
  const std::string_view uid = name.substr(u2 + 1);

  // Namespace: DNS-1123 label (63); pod: DNS-1123 subdomain (253).
  auto dns_chars = [](std::string_view s, size_t max_len, bool dots) {
    if (s.empty() || s.size() > max_len) return false;
    for (char c : s) {
      const bool ok =
          (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || (dots && c == '.');
      if (!ok) return false;
    }
    return true;
  };
  if (!dns_chars(ns, 63, false) || !dns_chars(pod, 253, true) || !is_pod_uid(uid)) {
    return std::nullopt;
  }
  return PodLogDir{PodRef{std::string(ns), std::string(pod)}, std::string(uid)};
}

PodDirectory::PodDirectory(PodDirectoryOptions options) : options_(std::move(options)) {}

std::optional<PodRef> PodDirectory::lookup(std::string_view uid, Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  // Scan errors are reported by refresh(); here the old data is the answer.
  if (!last_scan_ || now - *last_scan_ >= options_.max_age) (void)scan_locked(now);
  auto it = by_uid_.find(uid);
  if (it == by_uid_.end() && now - *last_scan_ >= options_.min_rescan_interval) {
    (void)scan_locked(now);
    it = by_uid_.find(uid);
  }
  if (it == by_uid_.end()) return std::nullopt;
  return it->second;
}

Status PodDirectory::refresh() {
  std::lock_guard<std::mutex> lock(mu_);
  return scan_locked(Clock::now());
}

size_t PodDirectory::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return by_uid_.size();
}

Status PodDirectory::scan_locked(Clock::time_point now) {
  // Counted as a scan even when it fails, so a missing root (not a
  // Kubernetes node, mount forgotten) is not retried on every lookup.
  last_scan_ = now;
  const int fd = open(options_.root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return errno_error("open " + options_.root);
  DIR* dir = fdopendir(fd);
  if (dir == nullptr) {
    const int err = errno;
    close(fd);
    return errno_error("opendir " + options_.root, err);
  }
  Map fresh;
  int err = 0;
  while (fresh.size() < options_.max_entries) {
    errno = 0;
    const dirent* e = readdir(dir);
    if (e == nullptr) {
      err = errno;
      break;
    }
    // No type check: the name format is strict, and DT_UNKNOWN file
    // systems would cost a stat per entry.
    if (std::optional<PodLogDir> p = parse_pod_log_dir_name(e->d_name)) {
      fresh.emplace(std::move(p->uid), std::move(p->pod));
    }
  }
  closedir(dir);
  if (err != 0) return errno_error("readdir " + options_.root, err);
  by_uid_ = std::move(fresh);
  return ok_status();
}

std::optional<uint32_t> parse_status_real_uid(std::string_view status) {
  for (size_t at = 0; at < status.size();) {
    size_t nl = status.find('\n', at);
    std::string_view line = status.substr(at, nl == std::string_view::npos ? std::string_view::npos : nl - at);
    at = nl == std::string_view::npos ? status.size() : nl + 1;
    if (!line.starts_with("Uid:")) continue;
    line.remove_prefix(4);
    while (!line.empty() && (line.front() == '\t' || line.front() == ' ')) line.remove_prefix(1);
    uint32_t uid = 0;
    auto [end, ec] = std::from_chars(line.data(), line.data() + line.size(), uid);
    if (ec != std::errc() || end == line.data()) return std::nullopt;
    return uid;
  }
  return std::nullopt;
}

namespace {

// Whose process it is. /proc/PID's owner is its effective uid, unless the
// process made itself non-dumpable (then root): only then is status read.
std::optional<uint32_t> read_real_uid(int dirfd, pid_t pid) {
  struct stat st;
  if (fstat(dirfd, &st) != 0) return std::nullopt;
  if (st.st_uid != 0) return st.st_uid;
  Result<BoundedText> status = read_bounded(dirfd, pid, "status", kMaxStatBytes);
  return status ? parse_status_real_uid(status->text) : std::nullopt;
}

}  // namespace

Result<ProcessIdentity> read_process_identity(pid_t pid, PodDirectory* pods) {
  const std::string dir_path = "/proc/" + std::to_string(pid);
  // Every read goes through this fd: it pins the process (struct pid), so
  // once the process dies reads fail with ESRCH even if the number is reused.
  Fd dir(open(dir_path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir.get() < 0) {
    const int err = errno;
    if (err == ENOENT || err == ESRCH) {
      return Error{ESRCH, "process " + std::to_string(pid) + " not found"};
    }
    return errno_error("open " + dir_path, err);
  }

  ProcessIdentity id;
  id.pid = pid;

  Result<BoundedText> stat_text = read_bounded(dir.get(), pid, "stat", kMaxStatBytes);
  if (!stat_text) return stat_text.error();
  if (stat_text->truncated) return Error{EINVAL, "malformed " + dir_path + "/stat: too long"};
  Result<StatFields> st = parse_proc_stat(stat_text->text);
  if (!st) return Error{st.error().code, dir_path + "/stat: " + st.error().message};
  // A zombie keeps its stat but has no exe and no allocations left: gone.
  if (st->state == 'Z' || st->state == 'X') {
    return Error{ESRCH, "process " + std::to_string(pid) + " exited"};
  }
  id.start_time = st->start_time;
  id.real_uid = read_real_uid(dir.get(), pid);

  Result<BoundedText> comm = read_bounded(dir.get(), pid, "comm", kMaxCommBytes);
  if (!comm) return comm.error();
  id.comm = std::move(comm->text);
  if (id.comm.ends_with('\n')) id.comm.pop_back();

  std::string exe(kMaxExeBytes, '\0');
  const ssize_t n = readlinkat(dir.get(), "exe", exe.data(), exe.size());
  if (n < 0) {
    // Only kernel threads lack an exe; a user process without one is
    // between releasing its memory and becoming a zombie.
    const int err = errno;
    if (err != ENOENT || !(st->flags & kPfKthread)) return proc_error(pid, "readlink", "exe", err);
    exe.clear();
  } else if (static_cast<size_t>(n) == exe.size()) {
    return Error{ENAMETOOLONG, "readlink " + dir_path + "/exe: target too long"};
  } else {
    exe.resize(static_cast<size_t>(n));
  }
  if (exe.size() > kDeletedSuffix.size() && exe.ends_with(kDeletedSuffix)) {
    exe.resize(exe.size() - kDeletedSuffix.size());
    id.exe_deleted = true;
  }
  id.exe = std::move(exe);

  Result<BoundedText> cgroup = read_bounded(dir.get(), pid, "cgroup", kMaxCgroupBytes);
  if (!cgroup) return cgroup.error();
  if (cgroup->truncated) {
    // Never parse a cut line as a whole one.
    const size_t last_nl = cgroup->text.rfind('\n');
    cgroup->text.resize(last_nl == std::string::npos ? 0 : last_nl + 1);
  }
  id.cgroup = parse_proc_cgroup(cgroup->text);
  if (id.cgroup) {
    CgroupIdentity cg = parse_cgroup_path(*id.cgroup);
    id.unit = std::move(cg.unit);
    id.pod_uid = std::move(cg.pod_uid);
    id.container_id = std::move(cg.container_id);
  }
  if (pods != nullptr && id.pod_uid) {
    if (std::optional<PodRef> pod = pods->lookup(*id.pod_uid)) {
      id.pod_namespace = std::move(pod->pod_namespace);
      id.pod_name = std::move(pod->pod_name);
    }
  }
  return id;
}

}  // namespace lw
