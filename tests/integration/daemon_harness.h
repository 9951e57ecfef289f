/* SPDX-License-Identifier: Apache-2.0 */
// Harness for the daemon's integration tests: runs `leakwatch run` on a
// config file in a private temporary directory, listening on a free
// loopback port, with a NOTIFY_SOCKET the test owns; talks to its HTTP API;
// and looks at a traced process's memory to tell whether the daemon's
// uprobes are in it.
//
// Like harness.h, every process started here is killed when its object goes
// away, so a failed assertion leaves nothing behind.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <thread>
#include <tuple>
#include <vector>

#include "harness.h"

namespace lw::itest {

// A directory under /tmp, removed with everything in it on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir &) = delete;
  TempDir &operator=(const TempDir &) = delete;
  const std::string &path() const { return path_; }

 private:
  std::string path_;
};

// Calls `probe` every `interval` until it returns true or `timeout` passed;
// returns whether it did. The last call happens after the deadline, so a
// condition that became true just in time still counts.
bool wait_until(milliseconds timeout, const std::function<bool()> &probe, milliseconds interval = milliseconds(50));

// A timed figure on a shared VM: runs `attempt(false, over)`, which sets
// `over` when its figure was over the bound (and asserts nothing about it),
// then once more as `attempt(true, over)`, which asserts it, unless the
// first ended in a fatal failure. Every other check is asserted in both.
void measure_again_if_over(const std::function<void(bool last, bool &over)> &attempt);

struct HttpReply {
  int status = 0;  // 0 when no HTTP reply came (connection refused, timeout)
  std::string body;
};

class DaemonProcess {
 public:
  struct Options {
    // The config file without its `listen` key, which the harness adds.
    std::string config_body;
    // Extra arguments after `run --config FILE`.
    std::vector<std::string> args = {"--log-level", "debug"};
    // Extra environment for the daemon, "NAME=VALUE" (NOTIFY_SOCKET is set
    // by the harness).
    std::vector<std::string> env;
  };

  // Writes the config and starts the daemon; does not wait for it.
  explicit DaemonProcess(Options options);
  ~DaemonProcess();
  DaemonProcess(const DaemonProcess &) = delete;
  DaemonProcess &operator=(const DaemonProcess &) = delete;

  pid_t pid() const { return process_->pid(); }
  int port() const { return port_; }
  const std::string &config_path() const { return config_path_; }
  const std::string &dir() const { return dir_.path(); }
  Process &process() { return *process_; }

  // Replaces the config file by rename (as editors and ConfigMap updates
  // do: one IN_MOVED_TO event, never a half-written file). write_config
  // keeps the `listen` key; write_raw_config writes `text` as it is.
  void write_config(const std::string &body);
  void write_raw_config(const std::string &text);

  // Waits for a notify-socket datagram carrying `assignment` (e.g.
  // "READY=1", "WATCHDOG=1") received since the daemon started; throws with
  // the daemon's stderr if the daemon exits first or nothing arrives in
  // time.
  void wait_notify(const std::string &assignment, milliseconds timeout);
  // Every notify-socket datagram received so far, in order, with when it
  // arrived (steady clock).
  struct Notification {
    std::chrono::steady_clock::time_point received;
    std::string message;
  };
  std::vector<Notification> notifications();

  HttpReply get(const std::string &path);
  // GET that must answer 200 with a JSON object; throws otherwise.
  Json get_json(const std::string &path);
  // The entry for `pid` in /api/v1/processes, if it is listed there.
  std::optional<Json> find_process(pid_t pid);
  // Polls /api/v1/processes until `pid` is listed; throws on timeout.
  Json wait_for_process(pid_t pid, milliseconds timeout);
  // Polls /api/v1/status until `predicate` holds for it; throws on timeout.
  Json wait_for_status(const std::function<bool(const Json &)> &predicate, milliseconds timeout,
                       const std::string &what);
  // The first /api/v1/processes/PID/sites whose timestamp is at or after
  // `unix_time`: a snapshot that includes everything that happened before;
  // and one without sites waiting for symbols, unless 20 s pass.
  Json sites_at_or_after(pid_t pid, double unix_time, milliseconds timeout);

  // Whether the daemon is still running (not reaped).
  bool running();
  // Sends `sig`; then waits for the exit; returns the wait status, or
  // nullopt if it did not exit within `timeout`.
  std::optional<int> signal_and_wait(int sig, milliseconds timeout);

  // The daemon's stderr, for failure messages.
  std::string diagnostics() const;

 private:
  std::string full_config(const std::string &body) const;
  void read_notifications();

  TempDir dir_;
  int port_ = 0;
  std::string config_path_;
  // The notify socket is drained all the time, as systemd does: the daemon
  // sends with a blocking sendto, and a full queue (net.unix.max_dgram_qlen,
  // 10 by default) would stall its consumer loop, watchdog pings and all.
  int notify_fd_ = -1;
  std::mutex notify_mu_;
  std::condition_variable notify_cv_;
  std::vector<std::string> notifications_;  // guarded by notify_mu_
  std::vector<std::chrono::steady_clock::time_point> notification_times_;  // guarded by notify_mu_, one per message
  std::atomic<bool> stop_reader_{false};
  std::thread notify_reader_;
  std::unique_ptr<Process> process_;
};

// Bounds for the daemon tests: generous for things that normally take
// milliseconds; each test stays far below them when the daemon works.
inline constexpr milliseconds kReadyTimeout{20000};  // READY=1 after start
inline constexpr milliseconds kApiTimeout{10000};    // a state the API must reach

// A config `match:` for exactly this comm.
inline std::string comm_selector(const std::string &comm) { return "{comm: \"^" + comm + "$\"}"; }

// Copies target program `name` into `dir` under a name unique on this
// machine while this test runs ("leaker-<test pid>", at most 15 characters,
// so it is the whole comm); returns the copy's path. The daemon watches the
// whole machine, and other test runs start targets of the same names: a
// selector on the copy's comm matches this test's processes only.
std::string private_target_copy(const std::string &dir, const std::string &name);

// The file name of a path: a private copy's comm and module name.
std::string file_name_of(const std::string &path);

// Seconds since the epoch, the clock of the API's timestamps.
double unix_now();

// The value of the sample `series` ("name" or "name{labels}") in /metrics
// text, or NaN.
double metric(const std::string &text, const std::string &series);

// utime + stime of every thread of `pid` (/proc/PID/stat fields 14, 15), in
// clock ticks (sysconf(_SC_CLK_TCK) a second); 0 when it cannot be read.
unsigned long long cpu_ticks(pid_t pid);

// A free TCP port on 127.0.0.1 (bound to port 0, then released).
int free_loopback_port();

// Reads a process's target protocol line "ready <pid>" and returns the pid
// it names (the target's own, which differs from the Process's pid when it
// runs under a wrapper such as unshare/chroot).
pid_t read_ready(Process &target, milliseconds timeout = milliseconds(10000));

// (allocations, bytes) live at the heap sites of a sites document whose
// leaf frame is `function` (a record under an unknown stack is not found).
std::pair<int64_t, int64_t> heap_live_at(const Json &sites, const std::string &function);

// Sends "go", then returns the parsed JSON of the next "done <json>" line.
Json go_and_read_truth(Process &target, milliseconds timeout = milliseconds(30000));

// One attached uprobe as /api/v1/status lists it.
struct ProbeLocation {
  std::string object;  // path of the probed file as /proc/PID/maps shows it
  uint64_t file_offset = 0;
  std::string symbols;
  bool operator<(const ProbeLocation &o) const {
    return std::tie(object, file_offset) < std::tie(o.object, o.file_offset);
  }
};
// The attached probes in a status document, one per (object, offset).
std::vector<ProbeLocation> attached_probes(const Json &status);
// A probe on a libc system-call wrapper (mmap, munmap, mremap, brk) or on
// ld.so's _dl_debug_state: placed in every mode, light included
// (decision libc-syscall-wrappers), and kept when the heap probes go.
bool is_syscall_probe(const ProbeLocation &probe);
// The attached probes without those: the allocator's and CUDA's.
std::vector<ProbeLocation> attached_heap_probes(const Json &status);

// The virtual address in `pid` where `object`'s byte at `file_offset` is
// mapped (preferring an executable mapping), or nullopt if `pid` does not
// map that part of the object.
std::optional<uint64_t> mapped_address(pid_t pid, const std::string &object, uint64_t file_offset);

// The byte at `address` in `pid`'s memory, read through /proc/PID/mem.
uint8_t read_process_byte(pid_t pid, uint64_t address);

// For each probe that `pid` maps: whether the byte there is an int3 (0xCC),
// the breakpoint a uprobe writes into the process's copy of the page.
struct BreakpointScan {
  int mapped = 0;       // probes whose object/offset `pid` maps
  int breakpoints = 0;  // of those, how many hold 0xCC
  std::string detail;   // one line per probe, for failure messages
};
BreakpointScan scan_breakpoints(pid_t pid, const std::vector<ProbeLocation> &probes);

}  // namespace lw::itest
