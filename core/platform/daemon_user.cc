// SPDX-License-Identifier: Apache-2.0
#include "core/platform/daemon_user.h"

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <vector>

#include "core/platform/fd.h"

namespace lw {

namespace {

std::string& user_name_storage() {
  static std::string name;
  return name;
}

std::atomic<bool> g_root_signals_only{false};
std::atomic<uint64_t> g_signals_refused{0};

std::string octal_mode(mode_t mode) {
  char buf[8];
  snprintf(buf, sizeof(buf), "%04o", static_cast<unsigned>(mode & 07777));
  return buf;
}

// mkdir -p of `dir`'s parents (0755, root's: the user needs no more than to
// pass through them, and holds CAP_DAC_READ_SEARCH anyway), then `dir`.
Status make_missing_dirs(const std::string& dir, mode_t mode) {
  for (size_t i = 1; i <= dir.size(); ++i) {
    if (i < dir.size() && dir[i] != '/') continue;
    const std::string prefix = dir.substr(0, i);
    if (mkdir(prefix.c_str(), i == dir.size() ? mode : 0755) != 0 && errno != EEXIST)
      return errno_error("create " + prefix);
  }
  return ok_status();
}

// Whether `user` may create files in a directory with this owner and mode
// without owning it (its group's or everyone's write and search bits).
bool writable_without_owning(const struct stat& st, const DaemonUser& user) {
  if (st.st_gid == user.gid && (st.st_mode & 0030) == 0030) return true;
  return (st.st_mode & 0003) == 0003;
}

}  // namespace

bool running_as_root() {
  uid_t real = 0, effective = 0, saved = 0;
  if (getresuid(&real, &effective, &saved) != 0) return geteuid() == 0;
  return real == 0 || effective == 0 || saved == 0;
}

Result<DaemonUser> find_user(const std::string& name) {
  long hint = sysconf(_SC_GETPW_R_SIZE_MAX);
  std::vector<char> buf(hint > 0 ? static_cast<size_t>(hint) : 16384);
  struct passwd pw {};
  struct passwd* found = nullptr;
  int rc;
  while ((rc = getpwnam_r(name.c_str(), &pw, buf.data(), buf.size(), &found)) == ERANGE && buf.size() < (1u << 20))
    buf.resize(buf.size() * 2);
  if (rc != 0) return errno_error("looking up user '" + name + "'", rc);
  if (found == nullptr) return Error{ENOENT, "no user '" + name + "' on this host"};
  return DaemonUser{name, pw.pw_uid, pw.pw_gid};
}

Result<UserDirAction> prepare_user_dir(const std::string& dir, mode_t mode, const DaemonUser& user) {
  if (dir.empty() || dir[0] != '/') return Error{EINVAL, "'" + dir + "' is not an absolute path"};
  UserDirAction action = UserDirAction::kNone;
  struct stat st {};
  if (lstat(dir.c_str(), &st) != 0) {
    if (errno != ENOENT) return errno_error("stat " + dir);
    if (Status made = make_missing_dirs(dir, mode); !made) return made.error();
    action = UserDirAction::kCreated;
  }
  // O_NOFOLLOW: a symlink put at the end of the path must not make the
  // daemon, still root, chown whatever it points at.
  Fd fd(open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid()) {
    if (errno == ELOOP) return Error{ELOOP, dir + " is a symlink: give the directory itself"};
    if (errno == ENOTDIR) return Error{ENOTDIR, dir + " is not a directory"};
    return errno_error("open " + dir);
  }
  if (fstat(fd.get(), &st) != 0) return errno_error("stat " + dir);
  if (st.st_uid == user.uid) {
    if ((st.st_mode & 0300) == 0300) return action;
    return Error{EACCES, dir + " belongs to " + user.name + " but has mode " + octal_mode(st.st_mode) +
                             ": give its owner write and search (u+wx)"};
  }
  const bool root_private = st.st_uid == 0 && (st.st_mode & (S_IWOTH | S_ISVTX)) == 0;
  if (action == UserDirAction::kCreated || root_private) {
    if (fchown(fd.get(), user.uid, user.gid) != 0) return errno_error("chown " + dir + " to " + user.name);
    if (action == UserDirAction::kCreated) return action;
    return (st.st_mode & 0300) == 0300 || fchmod(fd.get(), (st.st_mode & 07777) | 0300) == 0
               ? UserDirAction::kHandedOver
               : Result<UserDirAction>(errno_error("chmod u+wx " + dir));
  }
  if (writable_without_owning(st, user)) return action;
  return Error{EACCES, dir + " belongs to uid " + std::to_string(st.st_uid) + " (mode " + octal_mode(st.st_mode) +
                           ") and " + user.name + " (uid " + std::to_string(user.uid) +
                           "), the user the daemon runs as, cannot write it: chown it to " + user.name +
                           " or choose another directory"};
}

void set_daemon_user_name(std::string name) { user_name_storage() = std::move(name); }

const std::string& daemon_user_name() { return user_name_storage(); }

void set_signals_from_root_only() { g_root_signals_only.store(true); }
bool signals_from_root_only() { return g_root_signals_only.load(std::memory_order_relaxed); }
void note_signal_refused() { g_signals_refused.fetch_add(1, std::memory_order_relaxed); }
uint64_t signals_refused() { return g_signals_refused.load(std::memory_order_relaxed); }

}  // namespace lw
