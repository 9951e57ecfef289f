// SPDX-License-Identifier: Apache-2.0
// JIT frames named from a runtime's perf map (decision jit-perf-maps,
// docs/runtimes.md), end to end with real probes:
// - Node (/usr/bin/node, or $LW_NODE): tests/targets/node/keep_buffers.js, run with
//   --perf-basic-prof --interpreted-frames-native-stack, keeps 256 Buffers
//   of 64 KiB from the JS function keepBuffersInJs;
//   the same in its own pid and mount namespaces (a container: pid 1, its
//   own /tmp), where the map is only found through /proc/PID/root under the
//   namespace's pid;
// - Java (Debian's openjdk-17-jdk-headless): tests/targets/java/
//   KeepDirect.java, run with -XX:+PreserveFramePointer, its map written by
//   `jcmd PID Compiler.perfmap`, keeps 256 direct ByteBuffers of 64 KiB from
//   the JIT-compiled method keepDirectInJava.
//
// The target says "ready", `leakwatch top --json` attaches, the test waits
// until every unwind table is built, says "go", and the target keeps its
// buffers. The stacks must go on through the JIT code by frame pointers
// (they ended `no_cfi` at the first JIT frame before), and the bytes under
// a frame named for the function from /tmp/perf-PID.map must be what the
// target kept, within 1%.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/integration/daemon_harness.h"
#include "tests/integration/harness.h"

namespace lw::itest {
namespace {

constexpr const char* kNode = "/usr/bin/node";
constexpr const char* kJava = "/usr/bin/java";
constexpr const char* kJavac = "/usr/bin/javac";
constexpr const char* kJcmd = "/usr/bin/jcmd";
constexpr const char* kUnshare = "/usr/bin/unshare";

// The node to run: LW_NODE (another build, e.g. a wrapper that runs Debian's
// nodejs unpacked elsewhere; it must exec node, keeping its pid), else
// /usr/bin/node.
std::string node_binary() {
  const char* env = getenv("LW_NODE");
  return env && *env ? env : kNode;
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

bool has_function(const Json& site, const std::string& name) {
  for (const Json& f : site.at("frames"))
    if (f.at("function").get<std::string>().find(name) != std::string::npos) return true;
  return false;
}

// Removes the perf map the target leaves behind (V8 never does).
struct PerfMapCleanup {
  pid_t pid;
  ~PerfMapCleanup() { unlink(("/tmp/perf-" + std::to_string(pid) + ".map").c_str()); }
};

// What one run found: the bytes under the function the target named, and
// how its frames were found.
struct RuntimeRun {
  pid_t pid = 0;
  Json truth;
  Json snapshot;
  std::string function;
  int64_t expected = 0;
  int64_t under_function = 0;
  bool jit_frame = false;  // the function's frame: language jit, found by frame pointer
  bool below_jit = false;  // a native frame with a module under it: the walk went on
};

// Sums the live bytes of the sites with a frame naming `function`, and
// looks at those frames.
void tally(RuntimeRun& r) {
  r.under_function = 0;
  r.jit_frame = r.below_jit = false;
  for (const Json& site : r.snapshot.at("sites")) {
    if (site.at("kind").get<std::string>() == "mmap") continue;  // the runtime's own heap pages
    if (!has_function(site, r.function)) continue;
    r.under_function += site.at("live_bytes").get<int64_t>();
    bool seen = false;
    for (const Json& f : site.at("frames")) {
      if (f.at("function").get<std::string>().find(r.function) != std::string::npos) {
        seen = true;
        r.jit_frame = r.jit_frame || (f.at("language") == "jit" && f.at("unwound") == "fp");
      } else if (seen && f.at("language") == "native" && !f.at("module").get<std::string>().empty()) {
        r.below_jit = true;
      }
    }
  }
}

// The target (ready / go / done JSON) under `leakwatch top --json`: waits for
// the unwind tables, says go, then reads snapshots until the bytes under the
// function reach what the target kept (bounded). `after_ready` and
// `after_done` run at those points (the JVM's map is written on request).
// `traced`: the process to trace when it is not `target` itself (a child in
// a pid namespace); called once the target said ready.
// `top_args`: more options for `leakwatch top`.
RuntimeRun run_runtime(Process& target, const std::function<void()>& after_ready,
                       const std::function<void()>& after_done, const std::function<pid_t()>& traced = nullptr,
                       const std::vector<std::string>& top_args = {}) {
  RuntimeRun r;
  auto ready = target.read_line(std::chrono::milliseconds(60000));
  if (!ready || ready->rfind("ready ", 0) != 0)
    throw std::runtime_error("target: expected ready, got '" + ready.value_or("<EOF>") + "'; stderr: " +
                             target.stderr_text());
  r.pid = traced ? traced() : target.pid();
  if (after_ready) after_ready();
  std::vector<std::string> argv = {LW_LEAKWATCH_BIN, "top", "-p", std::to_string(r.pid), "--json", "--interval", "0.2"};
  argv.insert(argv.end(), top_args.begin(), top_args.end());
  Process leakwatch(argv);
  const double start = now_s();
  for (Json snap = next_json(leakwatch, 60); !tables_ready(snap) && now_s() - start < 30;)
    snap = next_json(leakwatch, 60);
  target.write_line("go");
  std::optional<std::string> done;
  do {
    done = target.read_line(std::chrono::milliseconds(30000));
    if (!done) throw std::runtime_error("target ended before done; stderr: " + target.stderr_text());
  } while (done->rfind("done ", 0) != 0);
  const double done_at = now_s();
  if (after_done) after_done();
  r.truth = Json::parse(done->substr(5));
  r.function = r.truth.at("function").get<std::string>();
  r.expected = r.truth.at("bytes").get<int64_t>();
  // Names arrive with the map's next read: wait (bounded) for the bytes.
  do {
    r.snapshot = next_json(leakwatch, 60);
    tally(r);
  } while ((r.snapshot.at("timestamp").get<double>() < done_at + 0.6 || r.under_function < r.expected) &&
           now_s() - done_at < 15);
  target.write_line("exit");
  target.wait_exit(std::chrono::milliseconds(5000));
  return r;
}

// `walk_goes_on`: a native frame with a module must follow the function's
// (Node: V8's entry frames, node's main). Not for Java: the method's caller
// is the interpreter, whose return addresses are pushed by the interpreter,
// not by a call, and so fail the frame-pointer validation (docs/runtimes.md).
// `map`: the perf map's path as the process sees it ("": /tmp/perf-PID.map).
void expect_named(const RuntimeRun& r, bool walk_goes_on, std::string map = "") {
  if (map.empty()) map = "/tmp/perf-" + std::to_string(r.pid) + ".map";
  EXPECT_NEAR(static_cast<double>(r.under_function), static_cast<double>(r.expected), 0.01 * r.expected)
      << "bytes under " << r.function << "; sites:\n" << describe_sites(r.snapshot);
  EXPECT_TRUE(r.jit_frame) << describe_sites(r.snapshot);
  const Json& jit = r.snapshot.at("jit");  // the map as read, charged to the process
  ASSERT_TRUE(jit.is_object()) << r.snapshot.dump();
  EXPECT_GT(jit.at("entries").get<int64_t>(), 0);
  EXPECT_LE(jit.at("memory_bytes").get<int64_t>(), 16 << 20);
  EXPECT_EQ(jit.at("perf_map").get<std::string>(), map);
  if (walk_goes_on) {
    EXPECT_TRUE(r.below_jit) << "the stack ends at the JIT frame; sites:\n" << describe_sites(r.snapshot);
  }
  std::printf("[          ] %s: %lld bytes under the function, %lld kept (%.3f%%)\n", r.function.c_str(),
              static_cast<long long>(r.under_function), static_cast<long long>(r.expected),
              100.0 * static_cast<double>(r.under_function - r.expected) / static_cast<double>(r.expected));
}

// Node keeping Buffers (tests/targets/node/keep_buffers.js) in a scratch
// working directory: --perf-basic-prof also has V8 write isolate-*-v8.log
// there (sh execs node: the same pid). Returns what `top` saw.
RuntimeRun run_node(const std::vector<std::string>& top_args = {}) {
  const std::string script = std::string(LW_SOURCE_DIR) + "/tests/targets/node/keep_buffers.js";
  TempDir scratch;
  Process target({"/bin/sh", "-c", "cd " + scratch.path() + " && exec " + node_binary() +
                                       " --perf-basic-prof --interpreted-frames-native-stack " + script + " 256"});
  PerfMapCleanup cleanup{target.pid()};
  return run_runtime(target, nullptr, nullptr, nullptr, top_args);
}

TEST(Runtimes, NodeBuffersLandUnderTheJsFunction) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (BPF)";
  if (access(node_binary().c_str(), X_OK) != 0)
    GTEST_SKIP() << node_binary() << " missing: apt-get install nodejs (scripts/install-deps.sh)";
  expect_named(run_node(), true);
}

// The perf map's caps from the config (symbols.perf_map_max_file_bytes,
// .perf_map_max_memory_bytes; here `top --config`'s symbols section): V8
// writes every builtin at start-up, well past 64 KiB, so a 64 KiB file cap
// stops the read there, and an 8 KiB memory cap refuses entries. Both show
// in `jit`; the JS function is not named (its line comes later).
TEST(Runtimes, NodePerfMapCapsFromTheConfig) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (BPF)";
  if (access(node_binary().c_str(), X_OK) != 0)
    GTEST_SKIP() << node_binary() << " missing: apt-get install nodejs (scripts/install-deps.sh)";
  TempDir dir;
  const std::string config = dir.path() + "/leakwatch.yaml";
  std::ofstream(config) << "symbols:\n  perf_map_max_file_bytes: 65536\n  perf_map_max_memory_bytes: 8192\n";
  const RuntimeRun r = run_node({"--config", config});
  const Json& jit = r.snapshot.at("jit");
  ASSERT_TRUE(jit.is_object()) << r.snapshot.dump();
  std::printf("[          ] caps 65536 read, 8192 kept: %s\n", jit.dump().c_str());
  EXPECT_TRUE(jit.at("file_capped").get<bool>()) << jit.dump();
  EXPECT_LE(jit.at("bytes_read").get<int64_t>(), 65536) << jit.dump();
  EXPECT_GT(jit.at("bytes_read").get<int64_t>(), 0) << jit.dump();
  EXPECT_LE(jit.at("memory_bytes").get<int64_t>(), 8192) << jit.dump();
  EXPECT_GT(jit.at("entries").get<int64_t>(), 0) << jit.dump();
  EXPECT_GT(jit.at("entries_refused").get<int64_t>(), 0) << jit.dump();
  EXPECT_EQ(r.under_function, 0) << describe_sites(r.snapshot);
}

// A container's view: Node as pid 1 of its own pid namespace, with its own
// /tmp (a tmpfs in its own mount namespace). The map is
// /tmp/perf-1.map there and nowhere on the host: it is found only through
// the process's root and under its namespace's pid (the last NSpid).
TEST(Runtimes, NodeInItsOwnPidAndMountNamespaces) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (BPF, namespaces)";
  if (access(node_binary().c_str(), X_OK) != 0)
    GTEST_SKIP() << node_binary() << " missing: apt-get install nodejs (scripts/install-deps.sh)";
  if (access(kUnshare, X_OK) != 0) GTEST_SKIP() << kUnshare << " missing (util-linux)";
  const std::string script = std::string(LW_SOURCE_DIR) + "/tests/targets/node/keep_buffers.js";
  // The script is read before the tmpfs hides /tmp (a checkout may live
  // there) and written into it.
  Process target({kUnshare, "--pid", "--fork", "--mount", "--mount-proc", "/bin/sh", "-c",
                  "s=$(cat '" + script + "') && mount -t tmpfs tmpfs /tmp && cd /tmp && "
                  "printf '%s\\n' \"$s\" > keep_buffers.js && exec " + node_binary() +
                      " --perf-basic-prof --interpreted-frames-native-stack /tmp/keep_buffers.js 256"});
  // unshare forks once: node is its only child.
  auto node_pid = [&] {
    const std::string self = std::to_string(target.pid());
    std::ifstream children("/proc/" + self + "/task/" + self + "/children");
    pid_t child = 0;
    children >> child;
    if (child <= 0) throw std::runtime_error("no child of unshare " + self);
    return child;
  };
  const RuntimeRun r = run_runtime(target, nullptr, nullptr, node_pid);
  EXPECT_NE(access(("/tmp/perf-" + std::to_string(r.pid) + ".map").c_str(), F_OK), 0)
      << "the map is in the host's /tmp: the test does not test the namespaces";
  expect_named(r, true, "/tmp/perf-1.map");
}

// Runs `argv` to its end (javac, jcmd): whether it exited 0.
bool run_tool(const std::vector<std::string>& argv, std::string* err) {
  Process p(argv);
  while (p.line_ready(std::chrono::milliseconds(60000)) && p.read_line(std::chrono::milliseconds(1000))) {
  }
  auto status = p.wait_exit(std::chrono::milliseconds(60000));
  if (err) *err = p.stderr_text();
  return status && WIFEXITED(*status) && WEXITSTATUS(*status) == 0;
}

TEST(Runtimes, JavaDirectBuffersLandUnderTheJitCompiledMethod) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (BPF)";
  // -XX:PerMethodTrapLimit=0: C2 compiles the paths it has not seen
  // instead of uncommon traps, so keepDirectInJava is not deoptimized in
  // the middle of the kept run. Without it, a trap there ran the method
  // interpreted, an interpreted frame ends the walk (docs/runtimes.md), and
  // 3 runs of 8 on 2026-11-29 put 50% of the bytes above the method (a
  // Deoptimization:: site in each); with it, 13 of 13 put them all under it
  // (8 of them beside two busy loops). What the test holds is the naming of
  // compiled frames; interpreted ones are a documented limit.
  for (const char* tool : {kJava, kJavac, kJcmd})
    if (access(tool, X_OK) != 0) GTEST_SKIP() << tool << " missing: apt-get install openjdk-17-jdk-headless";
  char dir[] = "/tmp/lw-java-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  struct RemoveDir {
    std::string path;
    ~RemoveDir() { std::filesystem::remove_all(path); }
  } remove{dir};
  std::string err;
  ASSERT_TRUE(run_tool({kJavac, "-d", dir, std::string(LW_SOURCE_DIR) + "/tests/targets/java/KeepDirect.java"}, &err))
      << err;
  Process target({kJava, "-XX:+PreserveFramePointer", "-XX:MaxDirectMemorySize=64m", "-Xbatch", "-XX:PerMethodTrapLimit=0", "-cp", dir,
                  "KeepDirect", "256"});
  PerfMapCleanup cleanup{target.pid()};
  const std::string pid = std::to_string(target.pid());
  // The map as the code cache is now: after warm-up, and again after the
  // kept run (anything compiled or recompiled since).
  auto perfmap = [&] { EXPECT_TRUE(run_tool({kJcmd, pid, "Compiler.perfmap"}, &err)) << err; };
  expect_named(run_runtime(target, perfmap, perfmap), false);
}

}  // namespace
}  // namespace lw::itest
