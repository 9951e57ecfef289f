// SPDX-License-Identifier: Apache-2.0
#include "harness.h"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <gtest/gtest.h>

namespace lw::itest {
namespace {

[[noreturn]] void fail(const std::string &what) { throw std::runtime_error(what); }

[[noreturn]] void fail_errno(const std::string &what) { fail(what + ": " + std::strerror(errno)); }

double now_unix_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

std::string basename_of(const std::string &path) {
  auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// What the child does between fork and exec: only async-signal-safe calls.
[[noreturn]] void exec_child(char *const *argv, char *const *envp, int in_fd, int out_fd, int err_fd,
                             const Process::Options &options) {
  // Its own process group, so teardown can kill it with everything it
  // forked; and killed if the test process dies first.
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (dup2(in_fd, 0) < 0 || dup2(out_fd, 1) < 0 || dup2(err_fd, 2) < 0) _exit(126);
  if (options.as_nobody || options.as_uid != 0) {
    const uid_t uid = options.as_nobody ? 65534 : options.as_uid;
    if (setgroups(0, nullptr) != 0 || setgid(static_cast<gid_t>(uid)) != 0 || setuid(uid) != 0) _exit(126);
  }
  if (envp != nullptr) {
    execve(argv[0], argv, envp);
  } else {
    execv(argv[0], argv);
  }
  _exit(127);
}

// clone3(2)'s argument up to set_tid_size (Linux 5.5), spelled out here:
// <linux/sched.h> clashes with glibc's <sched.h>.
struct CloneArgs {
  uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls, set_tid, set_tid_size;
};

// fork(), or, with want_pid, a fork onto that pid.
pid_t fork_onto(pid_t want_pid) {
  if (want_pid <= 0) return fork();
  pid_t tids[1] = {want_pid};
  CloneArgs args{};
  args.exit_signal = SIGCHLD;
  args.set_tid = reinterpret_cast<uint64_t>(tids);
  args.set_tid_size = 1;
  return static_cast<pid_t>(syscall(SYS_clone3, &args, sizeof args));
}

}  // namespace

std::string target_path(const std::string &name) {
  if (!name.empty() && name[0] == '/') return name;
  return std::string(LW_TARGETS_DIR) + "/" + name;
}

Process::Process(const std::vector<std::string> &argv, Options options) : name_(basename_of(argv.at(0))) {
  std::vector<char *> args;
  for (const std::string &arg : argv) args.push_back(const_cast<char *>(arg.c_str()));
  args.push_back(nullptr);

  // The child's environment is built here: between fork and exec only
  // async-signal-safe calls are allowed, and building it allocates.
  std::vector<std::string> env_storage;
  std::vector<char *> env;
  if (!options.env.empty()) {
    auto name_of = [](const std::string &entry) { return entry.substr(0, entry.find('=')); };
    std::set<std::string> overridden;
    for (const std::string &entry : options.env) overridden.insert(name_of(entry));
    for (char **e = environ; *e != nullptr; ++e) {
      if (!overridden.count(name_of(*e))) env_storage.emplace_back(*e);
    }
    env_storage.insert(env_storage.end(), options.env.begin(), options.env.end());
    for (std::string &entry : env_storage) env.push_back(entry.data());
    env.push_back(nullptr);
  }

  int in[2], out[2];
  if (pipe2(in, O_CLOEXEC) != 0) fail_errno("pipe2");
  if (pipe2(out, O_CLOEXEC) != 0) fail_errno("pipe2");
  stderr_fd_ = memfd_create((name_ + ".stderr").c_str(), MFD_CLOEXEC);
  if (stderr_fd_ < 0) fail_errno("memfd_create");

  pid_ = fork_onto(options.set_tid);
  if (pid_ < 0) {
    const int err = errno;
    for (int fd : {in[0], in[1], out[0], out[1], stderr_fd_}) close(fd);
    errno = err;
    fail_errno(options.set_tid ? "clone3 onto pid " + std::to_string(options.set_tid) : std::string("fork"));
  }
  if (pid_ == 0) exec_child(args.data(), env.empty() ? nullptr : env.data(), in[0], out[1], stderr_fd_, options);
  // Also from this side, so the group exists before anyone signals it.
  setpgid(pid_, pid_);
  close(in[0]);
  close(out[1]);
  stdin_fd_ = in[1];
  stdout_fd_ = out[0];
}

Process::~Process() {
  // The whole group: the process and whatever it forked (forker's child).
  kill(-pid_, SIGKILL);
  if (!status_) {
    int status;
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }
  close(stdin_fd_);
  close(stdout_fd_);
  close(stderr_fd_);
}

void Process::write_line(const std::string &line) {
  std::string data = line + "\n";
  const char *p = data.data();
  size_t left = data.size();
  while (left > 0) {
    ssize_t n = write(stdin_fd_, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail_errno("write to " + name_);
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
}

std::optional<std::string> Process::read_line(milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (auto newline = buffer_.find('\n'); newline != std::string::npos) {
      std::string line = buffer_.substr(0, newline);
      buffer_.erase(0, newline + 1);
      return line;
    }
    auto left = std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      fail(name_ + ": no line within " + std::to_string(timeout.count()) + " ms; partial output: '" +
           buffer_ + "'");
    }
    pollfd pfd{stdout_fd_, POLLIN, 0};
    int ready = poll(&pfd, 1, static_cast<int>(left.count()));
    if (ready < 0) {
      if (errno == EINTR) continue;
      fail_errno("poll");
    }
    if (ready == 0) continue;
    char chunk[65536];
    ssize_t n = read(stdout_fd_, chunk, sizeof chunk);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail_errno("read from " + name_);
    }
    if (n == 0) {
      if (buffer_.empty()) return std::nullopt;
      // A last line without a newline still counts.
      return std::exchange(buffer_, std::string());
    }
    buffer_.append(chunk, static_cast<size_t>(n));
  }
}

bool Process::line_ready(milliseconds timeout) {
  if (buffer_.find('\n') != std::string::npos) return true;
  pollfd pfd{stdout_fd_, POLLIN, 0};
  int ready = poll(&pfd, 1, static_cast<int>(timeout.count()));
  if (ready < 0 && errno != EINTR) fail_errno("poll");
  return ready > 0;
}

void Process::drain() {
  for (;;) {
    pollfd pfd{stdout_fd_, POLLIN, 0};
    int ready = poll(&pfd, 1, 0);
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0 || !(pfd.revents & POLLIN)) return;
    char chunk[65536];
    ssize_t n = read(stdout_fd_, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // EOF or an error: read_line reports it
    buffer_.append(chunk, static_cast<size_t>(n));
  }
}

std::optional<int> Process::wait_exit(milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!status_) {
    int status;
    pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r < 0 && errno != EINTR) fail_errno("waitpid " + name_);
    if (r == pid_) {
      status_ = status;
      break;
    }
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return status_;
}

std::string Process::stderr_text() const {
  std::string text;
  char chunk[4096];
  off_t offset = 0;
  for (;;) {
    ssize_t n = pread(stderr_fd_, chunk, sizeof chunk, offset);
    if (n <= 0) break;
    text.append(chunk, static_cast<size_t>(n));
    offset += n;
  }
  return text;
}

TraceSession::TraceSession(TraceOptions options)
    : options_(std::move(options)),
      target_([&] {
        std::vector<std::string> argv{target_path(options_.target)};
        argv.insert(argv.end(), options_.target_args.begin(), options_.target_args.end());
        return argv;
      }(), Process::Options{false, options_.target_env}),
      leakwatch_([&] {
        // The target must have announced itself before leakwatch starts:
        // leakwatch attaches to an already running process.
        auto ready = target_.read_line(milliseconds(10000));
        std::string expected = "ready " + std::to_string(target_.pid());
        if (!ready || *ready != expected) {
          fail(options_.target + ": expected '" + expected + "', got '" + ready.value_or("<EOF>") + "'");
        }
        std::vector<std::string> argv{LW_LEAKWATCH_BIN, "top", "-p", std::to_string(target_.pid()),
                                      "--json", "--interval", "0.2"};
        argv.insert(argv.end(), options_.leakwatch_args.begin(), options_.leakwatch_args.end());
        return argv;
      }(), Process::Options{false, options_.leakwatch_env}) {
  // The first line means all probes are attached; only then may the work
  // start. Attaching resolves symbols in every module: allow for it.
  attach_snapshot_ = next_snapshot(milliseconds(60000));
  target_.write_line("go");

  // leakwatch prints a snapshot every 0.2 s meanwhile: they are read as
  // they come, or its stdout pipe fills (64 KiB is a few snapshots of
  // native stacks) and its consumer blocks in write(), which delays what
  // it must follow during the work (a dlopen's rescan).
  std::optional<std::string> done;
  const auto deadline = std::chrono::steady_clock::now() + milliseconds(120000);
  do {
    while (!target_.line_ready(milliseconds(50))) {
      leakwatch_.drain();
      if (std::chrono::steady_clock::now() > deadline) fail(options_.target + ": no 'done' within 120 s");
    }
    done = target_.read_line(milliseconds(10000));
    if (!done) fail(options_.target + " ended before 'done'; stderr: " + target_.stderr_text());
  } while (done->rfind("done ", 0) != 0);
  const double done_at = now_unix_seconds();
  truth_ = Json::parse(done->substr(5));

  const double attached_at = attach_snapshot_.at("timestamp").get<double>();
  const double settled_at =
      std::max(done_at + options_.settle_after_done_s, attached_at + options_.settle_after_attach_s);
  // Symbols arrive from leakwatch's symbol thread a snapshot or two after
  // a stack is first seen (docs/architecture.md, "Symbolization"): the
  // settled snapshot is also one without pending frames, or the last
  // before a 20 s grace runs out.
  for (;;) {
    Json snapshot = next_snapshot(milliseconds(30000));
    const double at = snapshot.at("timestamp").get<double>();
    if (at >= settled_at && (!symbols_pending(snapshot) || at >= settled_at + 20)) {
      snapshot_ = std::move(snapshot);
      break;
    }
    if (snapshot.value("final", false)) fail("final snapshot before the target was done" + diagnostics());
  }
}

Json TraceSession::next_snapshot(milliseconds timeout) {
  auto line = leakwatch_.read_line(timeout);
  if (!line) fail("leakwatch ended its output" + diagnostics());
  Json snapshot = Json::parse(*line, nullptr, /*allow_exceptions=*/false);
  if (!snapshot.is_object()) fail("leakwatch printed a line that is no JSON object: '" + *line + "'" + diagnostics());
  return snapshot;
}

std::string TraceSession::diagnostics() const {
  return "\nleakwatch stderr:\n" + leakwatch_.stderr_text();
}

bool symbols_pending(const Json &snapshot) {
  for (const Json &site : snapshot.at("sites"))
    if (site.value("symbols_pending", false)) return true;
  return false;
}

std::map<std::string, LeafTotals> live_by_leaf(const Json &snapshot) {
  std::map<std::string, LeafTotals> leaves;
  for (const Json &site : snapshot.at("sites")) {
    const Json &frames = site.at("frames");
    // The physical leaf: functions inlined into it (DWARF inline chains,
    // e.g. glibc's __brk_call in brk) come first and are skipped.
    size_t leaf_at = 0;
    while (leaf_at + 1 < frames.size() && frames[leaf_at].value("inlined", false)) ++leaf_at;
    std::string function = frames.empty() ? "<no frames>" : frames[leaf_at].value("function", "<unknown>");
    LeafTotals &leaf = leaves[function];
    leaf.live_bytes += site.at("live_bytes").get<int64_t>();
    leaf.live_allocations += site.at("live_allocations").get<int64_t>();
    leaf.kinds.insert(site.at("kind").get<std::string>());
    if (!frames.empty()) leaf.modules.insert(basename_of(frames[leaf_at].value("module", "")));
  }
  return leaves;
}

std::string describe_sites(const Json &snapshot) {
  std::ostringstream out;
  out << "snapshot live_bytes=" << snapshot.value("live_bytes", Json()).dump()
      << " kernel_live_bytes=" << snapshot.value("kernel_live_bytes", Json()).dump()
      << " events=" << snapshot.value("events", Json()).dump()
      << " counters=" << snapshot.value("counters", Json()).dump() << "\n";
  for (const Json &site : snapshot.at("sites")) {
    out << "  " << site.value("kind", "?") << " live=" << site.value("live_bytes", Json()).dump() << " in "
        << site.value("live_allocations", Json()).dump() << ":";
    for (const Json &frame : site.value("frames", Json::array())) {
      out << " " << frame.value("function", "?") << "(" << basename_of(frame.value("module", "")) << ")";
    }
    out << "\n";
  }
  return out.str();
}

void expect_matches_truth(const TraceSession &session, const std::set<std::string> &target_modules) {
  expect_matches_truth(session.snapshot(), session.truth(), target_modules, session.diagnostics());
}

void expect_matches_truth(const Json &snapshot, const Json &truth, const std::set<std::string> &target_modules,
                          const std::string &diagnostics) {
  const std::string context = "\n" + describe_sites(snapshot) + diagnostics;
  const auto leaves = live_by_leaf(snapshot);
  const auto mmap_sites = truth.at("mmap_sites").get<std::set<std::string>>();

  for (const auto &[function, expected_json] : truth.at("sites").items()) {
    const int64_t expected = expected_json.get<int64_t>();
    auto it = leaves.find(function);
    const int64_t live = it == leaves.end() ? 0 : it->second.live_bytes;
    EXPECT_EQ(live, expected) << "live bytes of site " << function << context;
    if (expected > 0 && it != leaves.end()) {
      const Json no_kinds = Json::object();
      const Json &kinds = truth.contains("kinds") ? truth.at("kinds") : no_kinds;
      const std::set<std::string> kind{kinds.contains(function) ? kinds.at(function).get<std::string>()
                                       : mmap_sites.count(function) ? "mmap"
                                                                    : "heap"};
      EXPECT_EQ(it->second.kinds, kind) << "kind of site " << function << context;
    }
  }
  // Bytes attributed to any other function of the target: misattributed.
  for (const auto &[function, leaf] : leaves) {
    if (truth.at("sites").contains(function)) continue;
    for (const std::string &module : leaf.modules) {
      if (target_modules.count(module)) {
        EXPECT_EQ(leaf.live_bytes, 0) << "live bytes of " << function << " in " << module
                                      << ", which leaks nothing" << context;
      }
    }
  }
  if (truth.contains("total_live")) {
    EXPECT_EQ(snapshot.at("live_bytes").get<int64_t>(), truth.at("total_live").get<int64_t>())
        << "snapshot live_bytes" << context;
  }
}

std::pair<uint64_t, uint64_t> live_map_fdinfo(pid_t pid, uint64_t entries) {
  const std::string dir = "/proc/" + std::to_string(pid) + "/fdinfo";
  DIR* d = opendir(dir.c_str());
  if (!d) return {0, 0};
  std::pair<uint64_t, uint64_t> found{0, 0};
  while (dirent* e = readdir(d)) {
    std::ifstream f(dir + "/" + e->d_name);
    std::map<std::string, uint64_t> kv;
    std::string key;
    std::string value;
    while (f >> key >> value)
      if (key.back() == ':') kv[key.substr(0, key.size() - 1)] = std::strtoull(value.c_str(), nullptr, 0);
    if (kv["key_size"] != 16 || kv["value_size"] != 24) continue;
    // Several maps have those sizes; the live map is the largest of them.
    if (entries ? kv["max_entries"] == entries : kv["max_entries"] > found.first)
      found = {kv["max_entries"], kv["memlock"]};
  }
  closedir(d);
  return found;
}

Json next_json(Process &leakwatch, double timeout_s) {
  auto line = leakwatch.read_line(std::chrono::milliseconds(static_cast<int>(timeout_s * 1000)));
  if (!line) throw std::runtime_error("leakwatch ended its output; stderr: " + leakwatch.stderr_text());
  Json j = Json::parse(*line, nullptr, false);
  if (!j.is_object()) throw std::runtime_error("not JSON: " + *line);
  return j;
}

bool tables_ready(const Json &snap) {
  const Json &u = snap.at("unwind").at("objects");
  return u.at("pending").get<int64_t>() == 0 && snap.at("unwind").at("queue_depth").get<int64_t>() == 0;
}

}  // namespace lw::itest
