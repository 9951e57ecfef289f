// SPDX-License-Identifier: Apache-2.0
#include "core/symbols/debuginfod.h"

#include <dirent.h>
#include <dlfcn.h>
#include <elfutils/debuginfod.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <signal.h>
#include <spawn.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/platform/log.h"

namespace lw {

namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kMaxQueued = 256;
constexpr size_t kMaxRemembered = 4096;
constexpr size_t kMaxChildOutput = 8192;
constexpr size_t kMaxCacheEntries = 1u << 16;
// What the child may take past its own deadline before it is killed
// (process start, dlopen, writing the file).
constexpr auto kKillGrace = std::chrono::seconds(2);

bool hex_name(const char* s) {
  size_t n = 0;
  for (; s[n] != '\0'; ++n)
    if (!((s[n] >= '0' && s[n] <= '9') || (s[n] >= 'a' && s[n] <= 'f'))) return false;
  return n >= 2 && n <= 128;
}

// mkdir -p, mode 0700 for what it creates.
bool make_dirs(const std::string& path) {
  if (path.empty() || path[0] != '/') return false;
  for (size_t i = 1; i <= path.size(); ++i) {
    if (i < path.size() && path[i] != '/') continue;
    const std::string prefix = path.substr(0, i);
    if (mkdir(prefix.c_str(), 0700) != 0 && errno != EEXIST) return false;
  }
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace

DebuginfodFetcher::DebuginfodFetcher(DebuginfodOptions options) : options_(std::move(options)) {}

DebuginfodFetcher::~DebuginfodFetcher() {
  for (auto& [id, child] : running_) {
    if (child.pid < 0) continue;  // the spawner's
    kill(child.pid, SIGKILL);
    waitpid(child.pid, nullptr, 0);
    close(child.out_fd);
  }
}

bool DebuginfodFetcher::want(const std::string& build_id) {
  if (!enabled() || !hex_name(build_id.c_str())) return false;
  if (running_.count(build_id) != 0 ||
      std::find(queue_.begin(), queue_.end(), build_id) != queue_.end()) {
    return true;
  }
  auto it = done_.find(build_id);
  if (it != done_.end()) {
    if (Clock::now() < it->second) return false;
    done_.erase(it);
  }
  if (queue_.size() >= kMaxQueued) {
    ++counters_.not_started;
    return false;
  }
  queue_.push_back(build_id);
  return true;
}

void DebuginfodFetcher::start(const std::string& build_id) {
  ++counters_.fetches;
  auto fail = [&](const char* why) {
    ++counters_.failures;
    LW_LOG_WARN("debuginfod: cannot fetch %s: %s", build_id.c_str(), why);
    done_[build_id] = Clock::now() + options_.retry_after;
    ended_.push_back({build_id, false});
  };
  if (!make_dirs(options_.cache_dir)) return fail("cannot create the cache directory");
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) return fail("pipe");
  std::vector<std::string> env = child_env();
  if (int spawner = debuginfod_spawner_fd(); spawner >= 0) {
    close(pipe_fds[0]);
    close(pipe_fds[1]);
    // build-id, timeout, then the environment, NUL-separated, one datagram.
    std::string request = build_id + '\0' + std::to_string(options_.timeout_seconds) + '\0';
    for (const std::string& e : env) request += e + '\0';
    if (send(spawner, request.data(), request.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(request.size()))
      return fail("the fetch spawner is gone");
    Child child;  // no pid: the spawner runs it and enforces its deadline
    running_.emplace(build_id, std::move(child));
    return;
  }
  const std::string timeout = std::to_string(options_.timeout_seconds);
  std::vector<char*> envp, argv;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string arg0 = "leakwatch", arg1 = "debuginfod-fetch", arg2 = build_id, arg3 = timeout;
  argv = {arg0.data(), arg1.data(), arg2.data(), arg3.data(), nullptr};

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], 1);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // Default signal dispositions in the child (the daemon ignores SIGPIPE).
  sigset_t all;
  sigfillset(&all);
  posix_spawnattr_setsigdefault(&attr, &all);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, options_.helper.c_str(), &actions, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  close(pipe_fds[1]);
  if (rc != 0) {
    close(pipe_fds[0]);
    return fail(strerror(rc));
  }
  fcntl(pipe_fds[0], F_SETFL, fcntl(pipe_fds[0], F_GETFL) | O_NONBLOCK);
  Child child;
  child.pid = pid;
  child.out_fd = pipe_fds[0];
  child.deadline = Clock::now() + std::chrono::seconds(options_.timeout_seconds) + kKillGrace;
  running_.emplace(build_id, std::move(child));
}

std::vector<std::string> DebuginfodFetcher::child_env() const {
  std::string urls;
  for (const std::string& u : options_.urls) urls += (urls.empty() ? "" : " ") + u;
  const uint64_t max_size = std::min<uint64_t>(options_.cache_max_bytes, 2ull << 30);
  // Only these: nothing of the daemon's own environment reaches the child.
  return {
      "DEBUGINFOD_URLS=" + urls,
      "DEBUGINFOD_CACHE_PATH=" + options_.cache_dir,
      "DEBUGINFOD_TIMEOUT=" + std::to_string(options_.timeout_seconds),
      "DEBUGINFOD_MAXTIME=" + std::to_string(options_.timeout_seconds),
      "DEBUGINFOD_MAXSIZE=" + std::to_string(max_size),
  };
}

void DebuginfodFetcher::finish(const std::string& build_id, Child& child, bool timed_out) {
  char buf[1024];
  for (;;) {
    ssize_t n = read(child.out_fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (child.output.size() < kMaxChildOutput)
      child.output.append(buf, static_cast<size_t>(std::min<ssize_t>(n, 1024)));
  }
  close(child.out_fd);
  child.out_fd = -1;
  finish_output(build_id, child.output, timed_out);
}

void DebuginfodFetcher::finish_output(const std::string& build_id, const std::string& output,
                                      bool timed_out) {
  unsigned long long size = 0;
  if (!timed_out && sscanf(output.c_str(), "ok %llu", &size) == 1) {
    ++counters_.hits;
    counters_.bytes += size;
    // Fetched: never asked again while this fetcher lives (the file is in
    // the cache, unless trimmed away: then a new fetcher asks again).
    done_[build_id] = Clock::time_point::max();
    ended_.push_back({build_id, true});
    trim_cache();
  } else {
    ++counters_.failures;
    if (timed_out) ++counters_.timeouts;
    std::string why = timed_out ? "timed out" : output.substr(0, output.find('\n'));
    LW_LOG_INFO("debuginfod: no debug file for %s: %s", build_id.c_str(),
                why.empty() ? "helper failed" : why.c_str());
    done_[build_id] = Clock::now() + options_.retry_after;
    ended_.push_back({build_id, false});
  }
  if (done_.size() > kMaxRemembered) {
    // Forget the failures (fetched ones stay: they are in the cache).
    for (auto it = done_.begin(); it != done_.end();)
      it = it->second == Clock::time_point::max() ? std::next(it) : done_.erase(it);
  }
}

std::vector<DebuginfodFetcher::Outcome> DebuginfodFetcher::poll() {
  const auto now = Clock::now();
  if (int spawner = debuginfod_spawner_fd(); spawner >= 0) {
    // Replies: build-id, "1" when it timed out, the child's output.
    char buf[kMaxChildOutput + 256];
    for (;;) {
      ssize_t n = recv(spawner, buf, sizeof(buf) - 1, MSG_DONTWAIT);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      std::string reply(buf, static_cast<size_t>(n));
      const size_t a = reply.find('\0'), b = a == std::string::npos ? a : reply.find('\0', a + 1);
      if (b == std::string::npos) continue;
      const std::string id = reply.substr(0, a);
      auto it = running_.find(id);
      if (it == running_.end()) continue;
      finish_output(id, reply.substr(b + 1), reply.substr(a + 1, b - a - 1) == "1");
      running_.erase(it);
    }
  }
  for (auto it = running_.begin(); it != running_.end();) {
    Child& child = it->second;
    if (child.pid < 0) {  // the spawner's: it answers, whatever happens
      ++it;
      continue;
    }
    int status = 0;
    pid_t r = waitpid(child.pid, &status, WNOHANG);
    bool timed_out = false;
    if (r == 0 && now >= child.deadline) {
      kill(child.pid, SIGKILL);
      waitpid(child.pid, &status, 0);
      r = child.pid;
      timed_out = true;
    }
    if (r == 0) {
      ++it;
      continue;
    }
    finish(it->first, child, timed_out);
    it = running_.erase(it);
  }
  while (!queue_.empty() && running_.size() < std::max<size_t>(options_.max_parallel, 1)) {
    std::string id = std::move(queue_.front());
    queue_.pop_front();
    start(id);
  }
  return std::exchange(ended_, {});
}

void DebuginfodFetcher::trim_cache() {
  counters_.cache_evictions += trim_debuginfod_cache(options_.cache_dir, options_.cache_max_bytes);
}

uint64_t trim_debuginfod_cache(const std::string& cache_dir, uint64_t max_bytes) {
  int dir_fd = open(cache_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
  if (dir_fd < 0) return 0;
  DIR* dir = fdopendir(dir_fd);
  if (dir == nullptr) {
    close(dir_fd);
    return 0;
  }
  struct Entry {
    std::string name;
    uint64_t bytes = 0;
    int64_t used = 0;  // newest atime/mtime of its files, seconds
  };
  std::vector<Entry> entries;
  uint64_t total = 0;
  while (dirent* de = readdir(dir)) {
    if (entries.size() >= kMaxCacheEntries) break;
    if (!hex_name(de->d_name)) continue;
    struct stat st;
    if (fstatat(dir_fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode)) continue;
    Entry e;
    e.name = de->d_name;
    e.used = st.st_mtime;
    int sub_fd = openat(dir_fd, de->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    if (sub_fd < 0) continue;
    if (DIR* sub = fdopendir(sub_fd)) {
      size_t files = 0;
      while (dirent* f = readdir(sub)) {
        if (++files > 64) break;
        struct stat fs;
        if (fstatat(sub_fd, f->d_name, &fs, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(fs.st_mode)) continue;
        e.bytes += static_cast<uint64_t>(fs.st_size);
        e.used = std::max<int64_t>({e.used, fs.st_atime, fs.st_mtime});
      }
      closedir(sub);
    } else {
      close(sub_fd);
    }
    total += e.bytes;
    entries.push_back(std::move(e));
  }
  uint64_t deleted = 0;
  if (total > max_bytes) {
    std::sort(entries.begin(), entries.end(),
              [](const Entry& a, const Entry& b) { return a.used < b.used; });
    for (const Entry& e : entries) {
      if (total <= max_bytes) break;
      int sub_fd = openat(dir_fd, e.name.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
      if (sub_fd < 0) continue;
      if (DIR* sub = fdopendir(sub_fd)) {
        std::vector<std::string> names;
        while (dirent* f = readdir(sub))
          if (strcmp(f->d_name, ".") != 0 && strcmp(f->d_name, "..") != 0) names.emplace_back(f->d_name);
        for (const std::string& n : names) unlinkat(sub_fd, n.c_str(), 0);
        closedir(sub);
      } else {
        close(sub_fd);
      }
      if (unlinkat(dir_fd, e.name.c_str(), AT_REMOVEDIR) == 0) {
        total -= std::min(total, e.bytes);
        ++deleted;
      }
    }
  }
  closedir(dir);
  return deleted;
}

// ---- the child ----

namespace {

Clock::time_point g_deadline;

int abort_past_deadline(debuginfod_client*, long, long) { return Clock::now() >= g_deadline ? 1 : 0; }

// The child talks to the network and parses what servers send: it needs
// no capability, so it keeps none (and can gain none).
void drop_privileges() {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
  prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
  __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  syscall(SYS_capset, &header, data);
}

}  // namespace

int debuginfod_fetch_main(int argc, char** argv) {
  // argv: debuginfod-fetch BUILD_ID TIMEOUT_SECONDS
  if (argc != 3 || !hex_name(argv[1])) {
    printf("error %d usage: debuginfod-fetch BUILD_ID TIMEOUT_SECONDS\n", EINVAL);
    return 1;
  }
  // No getppid() == 1 check for a parent gone before PR_SET_PDEATHSIG: in
  // a container the daemon itself may be pid 1. The deadline bounds an
  // orphan anyway.
  drop_privileges();
  const long timeout = std::clamp(strtol(argv[2], nullptr, 10), 1L, 600L);
  g_deadline = Clock::now() + std::chrono::seconds(timeout);
  void* lib = dlopen(DEBUGINFOD_SONAME, RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    printf("error %d cannot load %s (install libdebuginfod1)\n", ENOENT, DEBUGINFOD_SONAME);
    return 1;
  }
  auto begin = reinterpret_cast<decltype(&debuginfod_begin)>(dlsym(lib, "debuginfod_begin"));
  auto end = reinterpret_cast<decltype(&debuginfod_end)>(dlsym(lib, "debuginfod_end"));
  auto find = reinterpret_cast<decltype(&debuginfod_find_debuginfo)>(dlsym(lib, "debuginfod_find_debuginfo"));
  auto set_progress =
      reinterpret_cast<decltype(&debuginfod_set_progressfn)>(dlsym(lib, "debuginfod_set_progressfn"));
  if (begin == nullptr || end == nullptr || find == nullptr || set_progress == nullptr) {
    printf("error %d %s lacks the client API\n", ENOSYS, DEBUGINFOD_SONAME);
    return 1;
  }
  debuginfod_client* client = begin();
  if (client == nullptr) {
    printf("error %d debuginfod_begin failed\n", ENOMEM);
    return 1;
  }
  set_progress(client, abort_past_deadline);
  char* path = nullptr;
  // Length 0: the build-id is given as a hex string.
  const int fd = find(client, reinterpret_cast<const unsigned char*>(argv[1]), 0, &path);
  end(client);
  if (fd < 0) {
    printf("error %d %s\n", -fd, strerror(-fd));
    return 1;
  }
  struct stat st;
  const long long size = fstat(fd, &st) == 0 ? static_cast<long long>(st.st_size) : 0;
  printf("ok %lld %s\n", size, path != nullptr ? path : "");
  free(path);
  close(fd);
  return 0;
}

namespace {

int g_spawner_fd = -1;

// Runs one fetch child, at most `timeout` seconds (plus the grace), and
// returns its output; *timed_out when it had to be killed.
std::string run_fetch_child(const std::string& build_id, uint32_t timeout,
                            std::vector<std::string> env, bool* timed_out) {
  *timed_out = false;
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) return "error pipe";
  std::vector<char*> envp, argv;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string arg0 = "leakwatch", arg1 = "debuginfod-fetch", arg2 = build_id, arg3 = std::to_string(timeout);
  argv = {arg0.data(), arg1.data(), arg2.data(), arg3.data(), nullptr};
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], 1);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, "/proc/self/exe", &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  close(pipe_fds[1]);
  if (rc != 0) {
    close(pipe_fds[0]);
    return std::string("error ") + strerror(rc);
  }
  std::string output;
  const auto deadline = Clock::now() + std::chrono::seconds(timeout) + kKillGrace;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      *timed_out = true;
      break;
    }
    struct pollfd pfd = {pipe_fds[0], POLLIN, 0};
    if (::poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000))) < 0 && errno != EINTR) break;
    char buf[1024];
    ssize_t n = read(pipe_fds[0], buf, sizeof(buf));
    if (n == 0) break;  // the child closed its output: it is done
    if (n > 0 && output.size() < kMaxChildOutput) output.append(buf, static_cast<size_t>(n));
  }
  close(pipe_fds[0]);
  if (*timed_out) kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  return output;
}

[[noreturn]] void spawner_main(int fd) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() == 1) _exit(0);  // the daemon is already gone
  prctl(PR_SET_NAME, "lw-fetch-spawn");
  // No capabilities: it only starts the fetch child (which has none either).
  struct __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct data[2] = {};
  (void)syscall(SYS_capset, &header, data);
  signal(SIGPIPE, SIG_IGN);
  char buf[16384];
  for (;;) {
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) _exit(0);  // the daemon closed its end
    std::vector<std::string> fields;
    size_t start = 0;
    for (size_t i = 0; i < static_cast<size_t>(n); ++i) {
      if (buf[i] != '\0') continue;
      fields.emplace_back(buf + start, i - start);
      start = i + 1;
    }
    if (fields.size() < 2 || !hex_name(fields[0].c_str())) continue;
    const uint32_t timeout = static_cast<uint32_t>(std::min<unsigned long>(strtoul(fields[1].c_str(), nullptr, 10), 3600));
    std::vector<std::string> env;
    for (size_t i = 2; i < fields.size(); ++i)
      if (fields[i].rfind("DEBUGINFOD_", 0) == 0) env.push_back(fields[i]);
    bool timed_out = false;
    std::string output = run_fetch_child(fields[0], timeout, std::move(env), &timed_out);
    std::string reply = fields[0] + '\0' + (timed_out ? "1" : "0") + '\0' + output;
    (void)send(fd, reply.data(), reply.size(), MSG_NOSIGNAL);
  }
}

}  // namespace

Status start_debuginfod_spawner() {
  if (g_spawner_fd >= 0) return ok_status();
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds) != 0)
    return errno_error("debuginfod spawner: socketpair");
  pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return errno_error("debuginfod spawner: fork");
  }
  if (pid == 0) {
    close(fds[0]);
    // Only the socket and the standard streams stay open.
    for (int fd = 3; fd < 1024; ++fd)
      if (fd != fds[1]) close(fd);
    spawner_main(fds[1]);
  }
  close(fds[1]);
  g_spawner_fd = fds[0];
  return ok_status();
}

int debuginfod_spawner_fd() { return g_spawner_fd; }

}  // namespace lw
