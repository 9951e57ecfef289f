// SPDX-License-Identifier: Apache-2.0
#include "daemon_harness.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <httplib.h>

#include <cerrno>
#include <cstdio>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <utility>

namespace lw::itest {
namespace {

[[noreturn]] void fail(const std::string &what) { throw std::runtime_error(what); }

[[noreturn]] void fail_errno(const std::string &what) { fail(what + ": " + std::strerror(errno)); }

// Closes a file descriptor on scope exit.
class FdGuard {
 public:
  explicit FdGuard(int fd) : fd_(fd) {}
  ~FdGuard() {
    if (fd_ >= 0) close(fd_);
  }
  FdGuard(const FdGuard &) = delete;
  FdGuard &operator=(const FdGuard &) = delete;
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

void write_file_atomically(const std::string &path, const std::string &text) {
  // The temporary name must not start with '.', and must differ from the
  // config's: the daemon treats events on both as "maybe the config" and
  // would reload (and count a reload) on the temporary file too.
  const std::string tmp = path + ".new";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    out.close();
    if (!out) fail("writing " + tmp);
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) fail_errno("rename " + tmp + " -> " + path);
}

}  // namespace

TempDir::TempDir() {
  char tmpl[] = "/tmp/lw-daemon-test.XXXXXX";
  if (mkdtemp(tmpl) == nullptr) fail_errno("mkdtemp");
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

void measure_again_if_over(const std::function<void(bool last, bool &over)> &attempt) {
  bool over = false;
  attempt(false, over);
  if (!over || ::testing::Test::HasFatalFailure()) return;
  std::printf("[ note     ] a timed figure over its bound in attempt 1: measured again\n");
  attempt(true, over);
}

bool wait_until(milliseconds timeout, const std::function<bool()> &probe, milliseconds interval) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const bool last_chance = std::chrono::steady_clock::now() >= deadline;
    if (probe()) return true;
    if (last_chance) return false;
    std::this_thread::sleep_for(interval);
  }
}

std::string private_target_copy(const std::string &dir, const std::string &name) {
  const std::string pid = std::to_string(getpid());
  const std::string copy = dir + "/" + name.substr(0, 15 - 1 - pid.size()) + "-" + pid;
  std::filesystem::copy_file(target_path(name), copy, std::filesystem::copy_options::overwrite_existing);
  return copy;
}

std::string file_name_of(const std::string &path) { return std::filesystem::path(path).filename(); }

double unix_now() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

double metric(const std::string &text, const std::string &series) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(series + " ", 0) == 0) return std::stod(line.substr(series.size() + 1));
  }
  return std::nan("");
}

unsigned long long cpu_ticks(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(stat.substr(close + 2));
  unsigned long long utime = 0, stime = 0;
  std::string f;
  for (int field = 3; field <= 15 && rest >> f; ++field) {  // fields 1, 2: pid, comm
    if (field == 14) utime = strtoull(f.c_str(), nullptr, 10);
    if (field == 15) stime = strtoull(f.c_str(), nullptr, 10);
  }
  return utime + stime;
}

int free_loopback_port() {
  FdGuard fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) fail_errno("socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (bind(fd.get(), reinterpret_cast<sockaddr *>(&addr), sizeof addr) != 0) fail_errno("bind 127.0.0.1:0");
  socklen_t len = sizeof addr;
  if (getsockname(fd.get(), reinterpret_cast<sockaddr *>(&addr), &len) != 0) fail_errno("getsockname");
  return ntohs(addr.sin_port);
}

DaemonProcess::DaemonProcess(Options options) : port_(free_loopback_port()) {
  config_path_ = dir_.path() + "/leakwatch.yaml";
  write_raw_config(full_config(options.config_body));

  // The test plays systemd: a datagram socket the daemon sends its
  // sd_notify messages to.
  const std::string notify_path = dir_.path() + "/notify.sock";
  // Owned by `notify` until the constructor cannot throw any more.
  FdGuard notify(socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (notify.get() < 0) fail_errno("socket(AF_UNIX)");
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (notify_path.size() >= sizeof addr.sun_path) fail("notify socket path too long: " + notify_path);
  std::memcpy(addr.sun_path, notify_path.c_str(), notify_path.size() + 1);
  if (bind(notify.get(), reinterpret_cast<sockaddr *>(&addr), sizeof addr) != 0) fail_errno("bind " + notify_path);

  std::vector<std::string> argv{LW_LEAKWATCH_BIN, "run", "--config", config_path_};
  argv.insert(argv.end(), options.args.begin(), options.args.end());
  Process::Options process_options;
  process_options.env = options.env;
  process_options.env.push_back("NOTIFY_SOCKET=" + notify_path);
  process_ = std::make_unique<Process>(argv, process_options);
  // Last: nothing after this may throw, or the destructor, which joins the
  // reader and closes the socket, would not run.
  notify_fd_ = notify.release();
  notify_reader_ = std::thread([this] { read_notifications(); });
}

DaemonProcess::~DaemonProcess() {
  // The Process destructor kills and reaps the daemon; the socket file goes
  // with the temporary directory.
  process_.reset();
  stop_reader_.store(true);
  if (notify_reader_.joinable()) notify_reader_.join();
  if (notify_fd_ >= 0) close(notify_fd_);
}

void DaemonProcess::read_notifications() {
  while (!stop_reader_.load()) {
    pollfd pfd{notify_fd_, POLLIN, 0};
    // Short slices, so the destructor never waits long for this thread.
    if (poll(&pfd, 1, 50) <= 0) continue;
    char buf[4096];
    ssize_t n = recv(notify_fd_, buf, sizeof buf, 0);
    if (n <= 0) continue;  // EAGAIN/EINTR: poll again
    {
      std::lock_guard<std::mutex> lock(notify_mu_);
      notifications_.emplace_back(buf, static_cast<size_t>(n));
      notification_times_.push_back(std::chrono::steady_clock::now());
    }
    notify_cv_.notify_all();
  }
}

std::string DaemonProcess::full_config(const std::string &body) const {
  std::string text = "listen: \"127.0.0.1:" + std::to_string(port_) + "\"\n" + body;
  // OOM reports of the targets the harness SIGKILLs go to the test's own
  // directory, never the host's /var/lib/leakwatch (unless the test says where).
  if (body.find("\noom:") == std::string::npos && !body.starts_with("oom:"))
    text += (text.ends_with("\n") ? "" : "\n") + std::string("oom:\n  report_dir: ") + dir_.path() + "/oom\n";
  return text;
}

void DaemonProcess::write_config(const std::string &body) { write_raw_config(full_config(body)); }

void DaemonProcess::write_raw_config(const std::string &text) { write_file_atomically(config_path_, text); }

void DaemonProcess::wait_notify(const std::string &assignment, milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto received = [&] {
    // A datagram may carry several newline-separated assignments.
    for (const std::string &message : notifications_) {
      std::istringstream lines(message);
      for (std::string line; std::getline(lines, line);) {
        if (line == assignment) return true;
      }
    }
    return false;
  };
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(notify_mu_);
      // Short slices, so a daemon that died is noticed promptly.
      if (notify_cv_.wait_for(lock, milliseconds(50), received)) return;
    }
    if (!running()) fail("leakwatch exited before sending " + assignment + diagnostics());
    if (std::chrono::steady_clock::now() >= deadline) {
      fail("no " + assignment + " on NOTIFY_SOCKET within " + std::to_string(timeout.count()) + " ms" +
           diagnostics());
    }
  }
}

std::vector<DaemonProcess::Notification> DaemonProcess::notifications() {
  std::lock_guard<std::mutex> lock(notify_mu_);
  std::vector<Notification> out;
  for (size_t i = 0; i < notifications_.size(); ++i) out.push_back({notification_times_[i], notifications_[i]});
  return out;
}

HttpReply DaemonProcess::get(const std::string &path) {
  httplib::Client client("127.0.0.1", port_);
  client.set_connection_timeout(std::chrono::seconds(1));
  client.set_read_timeout(std::chrono::seconds(2));
  auto result = client.Get(path);
  if (!result) return {};
  return {result->status, result->body};
}

Json DaemonProcess::get_json(const std::string &path) {
  HttpReply reply = get(path);
  if (reply.status != 200) {
    fail("GET " + path + ": status " + std::to_string(reply.status) + ", body '" + reply.body + "'" + diagnostics());
  }
  Json j = Json::parse(reply.body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) fail("GET " + path + ": not a JSON object: '" + reply.body + "'");
  return j;
}

std::optional<Json> DaemonProcess::find_process(pid_t pid) {
  Json all = get_json("/api/v1/processes");
  for (const Json &p : all.at("processes")) {
    if (p.at("pid").get<pid_t>() == pid) return p;
  }
  return std::nullopt;
}

Json DaemonProcess::wait_for_process(pid_t pid, milliseconds timeout) {
  std::optional<Json> found;
  if (!wait_until(timeout, [&] { return (found = find_process(pid)).has_value(); }, milliseconds(20))) {
    fail("pid " + std::to_string(pid) + " not listed in /api/v1/processes within " +
         std::to_string(timeout.count()) + " ms; status: " + get_json("/api/v1/status").dump() + diagnostics());
  }
  return *found;
}

Json DaemonProcess::wait_for_status(const std::function<bool(const Json &)> &predicate, milliseconds timeout,
                                    const std::string &what) {
  Json status;
  if (!wait_until(timeout, [&] { return predicate(status = get_json("/api/v1/status")); })) {
    fail("status never showed " + what + " within " + std::to_string(timeout.count()) +
         " ms; last: " + status.dump() + diagnostics());
  }
  return status;
}

Json DaemonProcess::sites_at_or_after(pid_t pid, double unix_time, milliseconds timeout) {
  const std::string path = "/api/v1/processes/" + std::to_string(pid) + "/sites";
  Json sites;
  // Symbols come from the daemon's symbol thread, a publish or two after a
  // stack is first seen (decision symbol-thread): also wait for
  // a snapshot without pending frames, for at most 20 s more.
  bool ok = wait_until(timeout + milliseconds(20000), [&] {
    sites = get_json(path);
    const double at = sites.at("timestamp").get<double>();
    return at >= unix_time && (!symbols_pending(sites) || at >= unix_time + 20);
  });
  if (!ok) fail("no snapshot of pid " + std::to_string(pid) + " at or after " + std::to_string(unix_time) +
                diagnostics());
  return sites;
}

bool DaemonProcess::running() { return !process_->wait_exit(milliseconds(0)).has_value(); }

std::optional<int> DaemonProcess::signal_and_wait(int sig, milliseconds timeout) {
  if (kill(process_->pid(), sig) != 0) fail_errno("kill leakwatch");
  return process_->wait_exit(timeout);
}

std::string DaemonProcess::diagnostics() const { return "\nleakwatch run stderr:\n" + process_->stderr_text(); }

pid_t read_ready(Process &target, milliseconds timeout) {
  auto line = target.read_line(timeout);
  if (!line || line->rfind("ready ", 0) != 0) {
    fail("expected 'ready <pid>', got '" + line.value_or("<EOF>") + "'; stderr: " + target.stderr_text());
  }
  return static_cast<pid_t>(std::stol(line->substr(6)));
}

std::pair<int64_t, int64_t> heap_live_at(const Json &sites, const std::string &function) {
  int64_t n = 0, bytes = 0;
  for (const Json &site : sites.at("sites")) {
    const Json &frames = site.at("frames");
    if (site.at("kind") != "heap" || frames.empty() || frames[0].value("function", "") != function) continue;
    n += site.at("live_allocations").get<int64_t>();
    bytes += site.at("live_bytes").get<int64_t>();
  }
  return {n, bytes};
}

Json go_and_read_truth(Process &target, milliseconds timeout) {
  target.write_line("go");
  for (;;) {
    auto line = target.read_line(timeout);
    if (!line) fail("target ended before 'done'; stderr: " + target.stderr_text());
    if (line->rfind("done ", 0) == 0) return Json::parse(line->substr(5));
  }
}

std::vector<ProbeLocation> attached_probes(const Json &status) {
  std::set<ProbeLocation> unique;
  for (const Json &p : status.at("probes")) {
    if (!p.at("attached").get<bool>()) continue;
    ProbeLocation loc{p.at("object").get<std::string>(), p.at("file_offset").get<uint64_t>(),
                      p.at("symbols").get<std::string>()};
    unique.insert(loc);
  }
  return {unique.begin(), unique.end()};
}

bool is_syscall_probe(const ProbeLocation &probe) {
  static const std::set<std::string> kNames = {"mmap", "munmap", "mremap", "brk", "_dl_debug_state"};
  return kNames.count(probe.symbols) != 0;
}

std::vector<ProbeLocation> attached_heap_probes(const Json &status) {
  std::vector<ProbeLocation> heap;
  for (const ProbeLocation &p : attached_probes(status))
    if (!is_syscall_probe(p)) heap.push_back(p);
  return heap;
}

std::optional<uint64_t> mapped_address(pid_t pid, const std::string &object, uint64_t file_offset) {
  std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
  if (!maps) fail("cannot read /proc/" + std::to_string(pid) + "/maps");
  std::optional<uint64_t> found;
  for (std::string line; std::getline(maps, line);) {
    // start-end perms offset dev inode path (the path may hold spaces)
    std::istringstream in(line);
    std::string range, perms, offset_hex, dev, inode;
    in >> range >> perms >> offset_hex >> dev >> inode;
    std::string path;
    std::getline(in >> std::ws, path);
    if (path != object) continue;
    const uint64_t start = std::stoull(range.substr(0, range.find('-')), nullptr, 16);
    const uint64_t end = std::stoull(range.substr(range.find('-') + 1), nullptr, 16);
    const uint64_t offset = std::stoull(offset_hex, nullptr, 16);
    if (file_offset < offset || file_offset >= offset + (end - start)) continue;
    const uint64_t address = start + (file_offset - offset);
    // Probes sit in code: an executable mapping is the one that runs.
    if (perms.find('x') != std::string::npos) return address;
    if (!found) found = address;
  }
  return found;
}

uint8_t read_process_byte(pid_t pid, uint64_t address) {
  const std::string path = "/proc/" + std::to_string(pid) + "/mem";
  FdGuard fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) fail_errno("open " + path);
  uint8_t byte = 0;
  if (pread(fd.get(), &byte, 1, static_cast<off_t>(address)) != 1) {
    fail_errno("read " + path + " at " + std::to_string(address));
  }
  return byte;
}

BreakpointScan scan_breakpoints(pid_t pid, const std::vector<ProbeLocation> &probes) {
  BreakpointScan scan;
  std::ostringstream detail;
  for (const ProbeLocation &probe : probes) {
    std::optional<uint64_t> address = mapped_address(pid, probe.object, probe.file_offset);
    if (!address) continue;
    ++scan.mapped;
    const uint8_t byte = read_process_byte(pid, *address);
    if (byte == 0xCC) ++scan.breakpoints;
    char line[512];
    snprintf(line, sizeof line, "  pid %d %s+0x%llx (%s) at 0x%llx: 0x%02x\n", pid, probe.object.c_str(),
             static_cast<unsigned long long>(probe.file_offset), probe.symbols.c_str(),
             static_cast<unsigned long long>(*address), byte);
    detail << line;
  }
  scan.detail = detail.str();
  return scan;
}

}  // namespace lw::itest
