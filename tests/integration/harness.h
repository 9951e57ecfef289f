/* SPDX-License-Identifier: Apache-2.0 */
// Harness for the integration tests: runs a target program from
// tests/targets (see target_protocol.h there) and `leakwatch top` on it, and
// hands back leakwatch's snapshots next to the target's ground truth.
//
// Every process it starts runs in its own process group, which is killed
// when its Process object goes away, so a failing assertion (or an
// exception thrown here, which GoogleTest reports as a failure) leaves no
// process behind; PR_SET_PDEATHSIG covers a crash of the test itself.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace lw::itest {

using Json = nlohmann::json;
using std::chrono::milliseconds;

// Path of a target program or library built from tests/targets; an
// absolute path is returned as it is (a copy elsewhere, e.g. on overlayfs).
std::string target_path(const std::string &name);

// A child process with pipes on stdin and stdout. Its stderr goes to an
// in-memory file that stderr_text() reads, so diagnostics can be attached
// to failures and a chatty child never blocks on a full pipe.
class Process {
 public:
  struct Options {
    // Drop to uid/gid 65534 (nobody) before exec.
    bool as_nobody = false;
    // Extra environment entries, "NAME=VALUE", added to (or replacing
    // entries of) this process's environment; empty: inherit it unchanged.
    std::vector<std::string> env;
    // Start the process on exactly this pid (clone3 with set_tid: root, and
    // the pid must be free). The constructor throws if it is taken.
    pid_t set_tid = 0;
    // Drop to this uid (and the same gid) before exec; 0: keep root. A
    // second unprivileged user beside nobody (tests of one user against
    // another: issue 32).
    uid_t as_uid = 0;
  };

  explicit Process(const std::vector<std::string> &argv, Options options);
  explicit Process(const std::vector<std::string> &argv) : Process(argv, Options{}) {}
  ~Process();
  Process(const Process &) = delete;
  Process &operator=(const Process &) = delete;

  pid_t pid() const { return pid_; }
  void write_line(const std::string &line);
  // The next line on stdout without its newline, or nullopt at EOF. Throws
  // if none arrives within the timeout.
  std::optional<std::string> read_line(milliseconds timeout);
  // Whether read_line would not wait: a whole line is buffered, or stdout
  // has data or EOF, within the timeout.
  bool line_ready(milliseconds timeout);
  // Reads what stdout holds now into the buffer, without waiting, so the
  // process never blocks on a full pipe; read_line returns it later.
  void drain();
  // The wait status once the process exited, or nullopt on timeout.
  std::optional<int> wait_exit(milliseconds timeout);
  std::string stderr_text() const;

 private:
  std::string name_;
  pid_t pid_ = -1;
  int stdin_fd_ = -1;
  int stdout_fd_ = -1;
  int stderr_fd_ = -1;
  std::string buffer_;
  std::optional<int> status_;
};

struct TraceOptions {
  std::string target;  // program name in the targets directory, or an absolute path
  std::vector<std::string> target_args;
  std::vector<std::string> target_env;      // "NAME=VALUE" added to the target's environment
  std::vector<std::string> leakwatch_args;  // after top -p PID --json --interval 0.2
  std::vector<std::string> leakwatch_env;   // "NAME=VALUE" added to leakwatch's environment
  // The result snapshot is the first whose timestamp is at least this long
  // after "done" arrived...
  double settle_after_done_s = 0.5;
  // ...and at least this long after the first (attach) snapshot.
  double settle_after_attach_s = 0.0;
};

// One target traced by one leakwatch, from "ready" to a settled snapshot.
// The constructor does the whole run up to the snapshot; both processes
// stay alive for the test to go on (e.g. make the target exit).
class TraceSession {
 public:
  explicit TraceSession(TraceOptions options);

  const Json &attach_snapshot() const { return attach_snapshot_; }
  const Json &truth() const { return truth_; }
  const Json &snapshot() const { return snapshot_; }
  pid_t target_pid() const { return target_.pid(); }
  Process &target() { return target_; }
  Process &leakwatch() { return leakwatch_; }
  const TraceOptions &options() const { return options_; }

  // leakwatch's next snapshot. Throws, with leakwatch's stderr, if it ends
  // its output or prints something that is not a JSON object.
  Json next_snapshot(milliseconds timeout);
  // What to append to a failure message: leakwatch's stderr.
  std::string diagnostics() const;

 private:
  TraceOptions options_;
  Process target_;
  Process leakwatch_;
  Json attach_snapshot_;
  Json truth_;
  Json snapshot_;
};

// The kernel's view of leakwatch's (pid) live map, from its descriptors'
// fdinfo: (max_entries, memlock bytes) of the hash map with the live map's
// key and value sizes (16, 24) and `entries` entries (0: the largest such
// map), or (0, 0).
std::pair<uint64_t, uint64_t> live_map_fdinfo(pid_t pid, uint64_t entries = 0);

// Whether any site of a snapshot still has frames waiting for symbols.
bool symbols_pending(const Json &snapshot);

// Live bytes, grouped by the (physical: inlined frames skipped) leaf frame's function (the allocating call
// site), with the kinds and modules reported for that leaf.
struct LeafTotals {
  int64_t live_bytes = 0;
  int64_t live_allocations = 0;
  std::set<std::string> kinds;
  std::set<std::string> modules;
};
std::map<std::string, LeafTotals> live_by_leaf(const Json &snapshot);

// The sites of a snapshot, one line each, for failure messages.
std::string describe_sites(const Json &snapshot);

// Checks the settled snapshot against the target's ground truth: every
// truth site's exact live bytes and kind, 0 live bytes for every other site
// whose leaf lies in one of target_modules (file names), and, where the
// truth has total_live, the snapshot's live_bytes.
void expect_matches_truth(const TraceSession &session, const std::set<std::string> &target_modules);
// The same checks on any snapshot-shaped object (a `top --json` line, or
// the daemon's /api/v1/processes/PID/sites), with `diagnostics` appended to
// every failure message.
void expect_matches_truth(const Json &snapshot, const Json &truth, const std::set<std::string> &target_modules,
                          const std::string &diagnostics);

// The next line of `top --json` (a running leakwatch) as a JSON object;
// throws when the output ends, the wait passes or the line is not one.
Json next_json(Process &leakwatch, double timeout_s);
// Whether a `top --json` snapshot says every unwind table is built (none
// pending, none queued).
bool tables_ready(const Json &snap);

}  // namespace lw::itest
