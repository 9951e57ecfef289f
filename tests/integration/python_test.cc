// SPDX-License-Identifier: Apache-2.0
// Python frames (decision python-frames), end to end with
// real probes on Debian's interpreter, /usr/bin/python3.11 (the package
// python3.11-minimal; NOT the first python3 on PATH, which may be another
// build). Targets: tests/targets/python/py_leaker.py (and torch_leaker.py,
// run with /usr/bin/python3, the interpreter Debian's python3-torch is for).
//
// Each run: the target says "ready", `leakwatch top --json` attaches, the
// test waits until leakwatch reads the process's Python frames and every
// unwind table is built (so stacks are mixed, not Python frames appended
// after a cut native stack), then says "go", and compares, per function,
// the live bytes of the sites whose innermost Python frame is that function
// with what the target says it keeps.
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/integration/harness.h"

namespace lw::itest {
namespace {

constexpr const char* kPython311 = "/usr/bin/python3.11";

std::string py_target(const std::string& name) { return std::string(LW_SOURCE_DIR) + "/tests/targets/python/" + name; }

bool executable(const char* path) { return access(path, X_OK) == 0; }

double now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// The line of `marker` ("# site: remember") in a target's source.
int source_line(const std::string& file, const std::string& marker) {
  std::ifstream in(file);
  int n = 0;
  for (std::string line; std::getline(in, line);) {
    ++n;
    if (line.find(marker) != std::string::npos) return n;
  }
  return -1;
}

struct PyRun {
  std::unique_ptr<Process> target;
  std::unique_ptr<Process> leakwatch;
  Json attach;    // the snapshot where frames were read and tables ready
  Json truth;
  Json snapshot;  // settled after "done"
  double ready_wait_s = 0;
};

PyRun run_python(const std::vector<std::string>& argv, const std::vector<std::string>& env = {},
                 double max_ready_wait_s = 120, const std::vector<std::string>& leakwatch_env = {},
                 const std::vector<std::string>& top_args = {}) {
  PyRun r;
  r.target = std::make_unique<Process>(argv, Process::Options{false, env, 0});
  auto ready = r.target->read_line(std::chrono::milliseconds(180000));
  if (!ready || *ready != "ready " + std::to_string(r.target->pid()))
    throw std::runtime_error("target: expected ready, got '" + ready.value_or("<EOF>") + "'; stderr: " +
                             r.target->stderr_text());
  std::vector<std::string> top = {LW_LEAKWATCH_BIN, "top", "-p", std::to_string(r.target->pid()), "--json",
                                  "--interval", "0.2"};
  top.insert(top.end(), top_args.begin(), top_args.end());
  r.leakwatch = std::make_unique<Process>(top, Process::Options{false, leakwatch_env, 0});
  const double start = now_s();
  for (;;) {
    Json snap = next_json(*r.leakwatch, 60);
    const Json& py = snap.at("python");
    if (!py.is_null() && py.at("frames").get<bool>() && tables_ready(snap)) {
      r.attach = std::move(snap);
      break;
    }
    if (now_s() - start > max_ready_wait_s) {
      r.attach = std::move(snap);
      break;  // the checks below say what is missing
    }
  }
  r.ready_wait_s = now_s() - start;
  r.target->write_line("go");
  std::optional<std::string> done;
  do {
    done = r.target->read_line(std::chrono::milliseconds(180000));
    if (!done) throw std::runtime_error("target ended before done; stderr: " + r.target->stderr_text());
  } while (done->rfind("done ", 0) != 0);
  const double done_at = now_s();
  r.truth = Json::parse(done->substr(5));
  for (;;) {
    Json snap = next_json(*r.leakwatch, 60);
    if (snap.at("timestamp").get<double>() >= done_at + 0.6) {
      r.snapshot = std::move(snap);
      break;
    }
  }
  return r;
}

// Live bytes by (innermost Python frame's function, kind).
std::map<std::pair<std::string, std::string>, int64_t> live_by_python_function(const Json& snap) {
  std::map<std::pair<std::string, std::string>, int64_t> out;
  for (const Json& site : snap.at("sites")) {
    std::string fn = "<no python frame>";
    for (const Json& f : site.at("frames"))
      if (f.value("language", "") == "python") {
        fn = f.at("function").get<std::string>();
        break;
      }
    out[{fn, site.at("kind").get<std::string>()}] += site.at("live_bytes").get<int64_t>();
  }
  return out;
}

std::string describe(const Json& snap) {
  std::string out = "python=" + snap.value("python", Json()).dump() + "\n";
  int n = 0;
  for (const Json& site : snap.at("sites")) {
    if (++n > 12) break;
    out += "  " + site.value("kind", "?") + " live=" + site.at("live_bytes").dump() +
           " truncated=" + site.value("truncated", Json()).dump() + ":";
    for (const Json& f : site.at("frames")) {
      std::string fn = f.value("function", "");
      if (fn.empty()) fn = "?";
      if (f.value("language", "") == "python")
        out += " [py " + fn + " " + f.value("file", "") + ":" + std::to_string(f.value("line", 0)) + "]";
      else
        out += " " + fn;
    }
    out += "\n";
  }
  return out;
}

// The first site whose innermost Python frame is `function`, by live bytes.
const Json* site_of(const Json& snap, const std::string& function) {
  for (const Json& site : snap.at("sites"))
    for (const Json& f : site.at("frames"))
      if (f.value("language", "") == "python") {
        if (f.at("function") == function) return &site;
        break;
      }
  return nullptr;
}

#define REQUIRE_PYTHON311()                                                                      \
  do {                                                                                           \
    if (geteuid() != 0) GTEST_SKIP() << "not root";                                              \
    if (!executable(kPython311))                                                                 \
      GTEST_SKIP() << kPython311 << " missing: scripts/install-deps.sh --with-test-tools installs " \
                                    "python3.11-minimal";                                        \
  } while (0)

void expect_within(int64_t got, int64_t want, double tolerance, const std::string& what, const Json& snap) {
  EXPECT_GE(static_cast<double>(got), static_cast<double>(want) * (1 - tolerance)) << what << "\n" << describe(snap);
  EXPECT_LE(static_cast<double>(got), static_cast<double>(want) * (1 + tolerance)) << what << "\n" << describe(snap);
}

// remember <- handle_request <- two_deep, with files and lines, exact bytes.
// `native_above`: with --native-frames-above-python (the native walk goes
// on past the first evaluation frame; by default it stops there).
void expect_two_deep(const std::vector<std::string>& leakwatch_env, bool native_above = false) {
  const std::string script = py_target("py_leaker.py");
  PyRun r = run_python({kPython311, script, "two_deep"}, {}, 120, leakwatch_env,
                       native_above ? std::vector<std::string>{"--native-frames-above-python"}
                                    : std::vector<std::string>{});
  ASSERT_TRUE(r.attach.at("python").at("frames").get<bool>()) << r.attach.dump();
  EXPECT_EQ(r.attach.at("python").at("version").get<std::string>().rfind("3.11.", 0), 0u);
  EXPECT_EQ(r.attach.at("python").at("support"), "tested");
  const auto live = live_by_python_function(r.snapshot);
  const int64_t want = r.truth.at("python_sites").at("remember").get<int64_t>();
  expect_within(live.count({"remember", "heap"}) ? live.at({"remember", "heap"}) : 0, want, 0.01,
                "bytes under remember()", r.snapshot);
  const Json* site = site_of(r.snapshot, "remember");
  ASSERT_NE(site, nullptr) << describe(r.snapshot);
  // remember (file:line) <- handle_request (file:line) <- two_deep, in that order.
  std::vector<const Json*> py;
  for (const Json& f : site->at("frames"))
    if (f.value("language", "") == "python") py.push_back(&f);
  ASSERT_GE(py.size(), 3u) << describe(r.snapshot);
  EXPECT_EQ(py[0]->at("function"), "remember");
  EXPECT_EQ(py[0]->at("file"), script);
  EXPECT_EQ(py[0]->at("line").get<int>(), source_line(script, "# site: remember"));
  EXPECT_EQ(py[1]->at("function"), "handle_request");
  EXPECT_EQ(py[1]->at("file"), script);
  EXPECT_EQ(py[1]->at("line").get<int>(), source_line(script, "# site: handle_request"));
  EXPECT_EQ(py[2]->at("function"), "two_deep");
  // Mixed: native frames below the Python ones (the allocator's callers in
  // the interpreter). By default the native walk stops at the first
  // evaluation frame and the Python frames, read whole, end the stack at the
  // module's; with native_above it goes on past them (Py_RunMain...).
  const Json& frames = site->at("frames");
  EXPECT_NE(frames[0].value("language", ""), "python") << describe(r.snapshot);
  if (native_above) {
    EXPECT_NE(frames.back().value("language", ""), "python") << describe(r.snapshot);
  } else {
    EXPECT_EQ(frames.back().value("language", ""), "python") << describe(r.snapshot);
    EXPECT_EQ(frames.back().value("function", ""), "<module>") << describe(r.snapshot);
    size_t first_py = 0;
    while (first_py < frames.size() && frames[first_py].value("language", "") != "python") ++first_py;
    for (size_t i = first_py; i < frames.size(); ++i)
      EXPECT_EQ(frames[i].value("language", ""), "python") << i << "\n" << describe(r.snapshot);
  }
  EXPECT_TRUE(site->at("truncated").is_null()) << describe(r.snapshot);
  r.target->write_line("exit");
  EXPECT_TRUE(r.target->wait_exit(std::chrono::milliseconds(10000)).has_value());
}

TEST(LeakwatchPython, LeakTwoFunctionsDeepHasBothFramesWithFileAndLine) {
  REQUIRE_PYTHON311();
  expect_two_deep({});
}

// unwind.native_frames_above_python (decision python-frames, "Where the
// native walk stops"): the interpreter's frames between and above the
// Python ones are walked too, and the Python frames are the same.
TEST(LeakwatchPython, NativeFramesAbovePythonWhenAsked) {
  REQUIRE_PYTHON311();
  expect_two_deep({}, true);
}

// The memo of code objects' first lines (decision code-object-memo), off: every
// frame reads its code object, and the frames are the same as with it.
TEST(LeakwatchPython, TheSameFramesWithoutTheCodeMemo) {
  REQUIRE_PYTHON311();
  expect_two_deep({"LW_BENCH_NO_PY_CODE_MEMO=1"});
}

// 3.12 and 3.13 are `untested` (decision python-frames): no CI
// machine is known to have them. By hand, with interpreters of those
// versions (e.g. pyenv's, built --enable-shared):
//   LW_PYTHON_INTERPRETERS=/root/.pyenv/versions/3.12.1/bin/python3.12:/root/.pyenv/versions/3.13.0/bin/python3.13
//   build/tests/lw_integration_tests --gtest_filter=LeakwatchPython.OtherInterpretersFromEnvironment
TEST(LeakwatchPython, OtherInterpretersFromEnvironment) {
  if (geteuid() != 0) GTEST_SKIP() << "not root";
  const char* list = getenv("LW_PYTHON_INTERPRETERS");
  if (!list || !*list) GTEST_SKIP() << "LW_PYTHON_INTERPRETERS (colon-separated interpreters) not set";
  const std::string script = py_target("py_leaker.py");
  std::string all = list;
  for (size_t start = 0; start <= all.size();) {
    size_t end = all.find(':', start);
    if (end == std::string::npos) end = all.size();
    const std::string python = all.substr(start, end - start);
    start = end + 1;
    if (python.empty()) continue;
    SCOPED_TRACE(python);
    PyRun r = run_python({python, script, "two_deep"});
    ASSERT_TRUE(r.attach.at("python").at("frames").get<bool>()) << r.attach.dump();
    std::printf("[ interpreter ] %s: python %s\n", python.c_str(), r.attach.at("python").dump().c_str());
    const auto live = live_by_python_function(r.snapshot);
    const int64_t want = r.truth.at("python_sites").at("remember").get<int64_t>();
    expect_within(live.count({"remember", "heap"}) ? live.at({"remember", "heap"}) : 0, want, 0.01,
                  "bytes under remember()", r.snapshot);
    const Json* site = site_of(r.snapshot, "remember");
    ASSERT_NE(site, nullptr) << describe(r.snapshot);
    std::vector<const Json*> py;
    for (const Json& f : site->at("frames"))
      if (f.value("language", "") == "python") py.push_back(&f);
    ASSERT_GE(py.size(), 2u) << describe(r.snapshot);
    EXPECT_EQ(py[0]->at("line").get<int>(), source_line(script, "# site: remember"));
    EXPECT_EQ(py[1]->at("function"), "handle_request");
    EXPECT_EQ(py[1]->at("line").get<int>(), source_line(script, "# site: handle_request"));
  }
}

// A Python in a container with its own root: its interpreter and script
// exist only under that root (/opt/python/bin/python3.11, /app/...), in
// its own mount namespace. The daemon opens the interpreter through
// /proc/PID/map_files and reads memory by the host pid, so the frames
// read as the container sees its files.
TEST(LeakwatchPython, ContainerWithItsOwnRoot) {
  REQUIRE_PYTHON311();
  if (!executable("/usr/bin/unshare") || !executable("/usr/sbin/chroot"))
    GTEST_SKIP() << "unshare or chroot missing (util-linux, coreutils)";
  char dir_template[] = "/tmp/lw_pyroot_XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::string root = dir_template;
  auto sh = [](const std::string& cmd) { return system(cmd.c_str()); };
  ASSERT_EQ(sh("mkdir -p " + root + "/opt/python/bin " + root + "/app " + root + "/usr " + root + "/lib " +
               root + "/lib64 " + root + "/proc && cp " + kPython311 + " " + root +
               "/opt/python/bin/python3.11 && cp " + py_target("py_leaker.py") + " " + py_target("lw_protocol.py") +
               " " + root + "/app/"),
            0);
  // Same pid all the way: unshare (no fork) -> sh -> chroot -> python.
  const std::string inner = "mount --rbind /usr " + root + "/usr && mount --rbind /lib " + root +
                            "/lib && mount --rbind /lib64 " + root + "/lib64 && mount -t proc proc " + root +
                            "/proc && exec /usr/sbin/chroot " + root +
                            " /opt/python/bin/python3.11 /app/py_leaker.py two_deep";
  PyRun r = run_python({"/usr/bin/unshare", "-m", "--propagation", "private", "/bin/sh", "-c", inner});
  ASSERT_TRUE(r.attach.at("python").at("frames").get<bool>()) << r.attach.dump();
  // /proc/PID/maps names it from the reader's root: the host path ends so.
  EXPECT_NE(r.attach.at("python").at("object").get<std::string>().find("/opt/python/bin/python3.11"),
            std::string::npos);
  const auto live = live_by_python_function(r.snapshot);
  const int64_t want = r.truth.at("python_sites").at("remember").get<int64_t>();
  expect_within(live.count({"remember", "heap"}) ? live.at({"remember", "heap"}) : 0, want, 0.01,
                "bytes under remember() in the container", r.snapshot);
  const Json* site = site_of(r.snapshot, "remember");
  ASSERT_NE(site, nullptr) << describe(r.snapshot);
  for (const Json& f : site->at("frames")) {
    if (f.value("language", "") == "python" && f.at("function") == "remember") {
      EXPECT_EQ(f.at("file"), "/app/py_leaker.py");
    }
  }
  r.target->write_line("exit");
  (void)r.target->wait_exit(std::chrono::milliseconds(10000));
  // Never a recursive delete here: were a bind mount still visible, it
  // would reach the host's /usr. Files by name, then empty directories.
  (void)sh("rm -f " + root + "/opt/python/bin/python3.11 " + root + "/app/py_leaker.py " + root +
           "/app/lw_protocol.py; rm -rf " + root + "/app/__pycache__; rmdir " + root + "/opt/python/bin " + root +
           "/opt/python " + root + "/opt " + root + "/app " + root + "/usr " + root + "/lib " + root + "/lib64 " +
           root + "/proc " + root + " 2>/dev/null");
}

TEST(LeakwatchPython, TwoThreadsLeakingFromDifferentFunctions) {
  REQUIRE_PYTHON311();
  PyRun r = run_python({kPython311, py_target("py_leaker.py"), "threads"});
  const auto live = live_by_python_function(r.snapshot);
  for (const char* fn : {"leak_in_thread_a", "leak_in_thread_b"}) {
    const int64_t want = r.truth.at("python_sites").at(fn).get<int64_t>();
    expect_within(live.count({fn, "heap"}) ? live.at({fn, "heap"}) : 0, want, 0.01, fn, r.snapshot);
  }
  // Each thread's own chain: a thread's function never sits under the other's.
  for (const Json& site : r.snapshot.at("sites")) {
    bool a = false, b = false;
    for (const Json& f : site.at("frames")) {
      a = a || f.value("function", "") == "leak_in_thread_a";
      b = b || f.value("function", "") == "leak_in_thread_b";
    }
    EXPECT_FALSE(a && b) << describe(r.snapshot);
  }
}

TEST(LeakwatchPython, AsyncioCoroutineLeak) {
  REQUIRE_PYTHON311();
  PyRun r = run_python({kPython311, py_target("py_leaker.py"), "asyncio"});
  const auto live = live_by_python_function(r.snapshot);
  const int64_t want = r.truth.at("python_sites").at("cache_response").get<int64_t>();
  expect_within(live.count({"cache_response", "heap"}) ? live.at({"cache_response", "heap"}) : 0, want, 0.01,
                "bytes under the coroutine cache_response()", r.snapshot);
  const Json* site = site_of(r.snapshot, "cache_response");
  ASSERT_NE(site, nullptr) << describe(r.snapshot);
  // The coroutine runs from the event loop: its caller chain is asyncio's.
  bool loop_frame = false;
  for (const Json& f : site->at("frames"))
    loop_frame = loop_frame || (f.value("language", "") == "python" &&
                                f.value("file", "").find("asyncio") != std::string::npos);
  EXPECT_TRUE(loop_frame) << describe(r.snapshot);
}

TEST(LeakwatchPython, GeneratorFramesUnderTheirConsumer) {
  REQUIRE_PYTHON311();
  const std::string script = py_target("py_leaker.py");
  PyRun r = run_python({kPython311, script, "generator"});
  const auto live = live_by_python_function(r.snapshot);
  const int64_t want = r.truth.at("python_sites").at("produce").get<int64_t>();
  expect_within(live.count({"produce", "heap"}) ? live.at({"produce", "heap"}) : 0, want, 0.01,
                "bytes made in the generator produce()", r.snapshot);
  const Json* site = site_of(r.snapshot, "produce");
  ASSERT_NE(site, nullptr) << describe(r.snapshot);
  std::vector<const Json*> py;
  for (const Json& f : site->at("frames"))
    if (f.value("language", "") == "python") py.push_back(&f);
  ASSERT_GE(py.size(), 2u) << describe(r.snapshot);
  EXPECT_EQ(py[0]->at("line").get<int>(), source_line(script, "# site: produce"));
  EXPECT_EQ(py[1]->at("function"), "consume_generated");  // the generator's frame links to its consumer
}

TEST(LeakwatchPython, ChurnReturnsToBaseline) {
  REQUIRE_PYTHON311();
  PyRun r = run_python({kPython311, py_target("py_leaker.py"), "churn"});
  const auto live = live_by_python_function(r.snapshot);
  const int64_t churned = r.truth.at("facts").at("churned_bytes").get<int64_t>();
  int64_t kept = 0;
  for (const auto& [key, bytes] : live)
    if (key.first == "churn_once" || key.first == "churn") kept += bytes;
  EXPECT_EQ(kept, 0) << "of " << churned << " churned\n" << describe(r.snapshot);
}

TEST(LeakwatchPython, SmallObjectsShowAsArenaGrowthUnderTheirFunction) {
  REQUIRE_PYTHON311();
  PyRun r = run_python({kPython311, py_target("py_leaker.py"), "small"});
  const auto live = live_by_python_function(r.snapshot);
  const int64_t want = r.truth.at("python_sites").at("make_small_objects").get<int64_t>();
  const int64_t arenas = live.count({"make_small_objects", "mmap"}) ? live.at({"make_small_objects", "mmap"}) : 0;
  // Arenas are whole (1 MiB in 3.11) and hold size-class slots (136 B for
  // a 133-byte object), so their bytes exceed the objects' a little.
  EXPECT_GE(arenas, want) << describe(r.snapshot);
  EXPECT_LE(arenas, want * 13 / 10 + (2 << 20)) << describe(r.snapshot);
  std::printf("[ figures ] %lld bytes of small objects, %lld bytes of arenas under make_small_objects\n",
              static_cast<long long>(want), static_cast<long long>(arenas));
}

TEST(LeakwatchPython, SmallObjectsPerObjectWithPythonmallocMalloc) {
  REQUIRE_PYTHON311();
  PyRun r = run_python({kPython311, py_target("py_leaker.py"), "small"}, {"PYTHONMALLOC=malloc"});
  const auto live = live_by_python_function(r.snapshot);
  const int64_t want = r.truth.at("python_sites").at("make_small_objects").get<int64_t>();
  const int64_t heap = live.count({"make_small_objects", "heap"}) ? live.at({"make_small_objects", "heap"}) : 0;
  // The objects (exact sizes), plus the list's item array as it grows (8
  // bytes a reference, realloc'd by the same function).
  EXPECT_GE(heap, want) << describe(r.snapshot);
  EXPECT_LE(heap, want + want / 10) << describe(r.snapshot);
  // One record per object (150,000: under the live map's default 262,144).
  int64_t allocations = 0;
  for (const Json& site : r.snapshot.at("sites"))
    for (const Json& f : site.at("frames"))
      if (f.value("language", "") == "python") {
        if (f.at("function") == "make_small_objects" && site.at("kind") == "heap")
          allocations += site.at("live_allocations").get<int64_t>();
        break;
      }
  EXPECT_GE(allocations, 150000) << describe(r.snapshot);
}

TEST(LeakwatchPython, TorchOutputsKeptByAPythonFunction) {
  if (geteuid() != 0) GTEST_SKIP() << "not root";
  if (system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "PyTorch is not installed for /usr/bin/python3 (Debian's python3-torch: "
                    "scripts/install-deps.sh --with-bench-tools); CI does not install it";
  const std::string script = py_target("torch_leaker.py");
  // libtorch's process maps 314 objects; their unwind tables (from the disk
  // cache after the first run) may take a minute or more on a loaded
  // machine. Without them the native part is cut short and the Python
  // frames follow it: the order checked below holds either way.
  PyRun r = run_python({"/usr/bin/python3", script}, {}, 60);
  ASSERT_TRUE(r.attach.at("python").at("frames").get<bool>());
  const Json* site = site_of(r.snapshot, "keep_outputs");
  ASSERT_NE(site, nullptr) << describe(r.snapshot);
  // torch C++ (at::, c10::) <- keep_outputs (file:line). The tensor tier
  // (decision tensor-tier) records the tensor at alloc_cpu itself, whose
  // own frame is the allocator's and not shown; the heap tier (--no-tensors)
  // shows alloc_cpu below posix_memalign.
  const Json& frames = site->at("frames");
  EXPECT_EQ(site->at("kind"), "tensor_cpu") << describe(r.snapshot);
  size_t alloc_cpu = frames.size(), keep = frames.size();
  for (size_t i = 0; i < frames.size(); ++i) {
    const std::string fn = frames[i].value("function", "");
    if (alloc_cpu == frames.size() && (fn.find("alloc_cpu") != std::string::npos || fn.rfind("at::", 0) == 0 ||
                                       fn.rfind("c10::", 0) == 0))
      alloc_cpu = i;
    if (keep == frames.size() && fn == "keep_outputs") keep = i;
  }
  ASSERT_LT(alloc_cpu, frames.size()) << describe(r.snapshot);
  ASSERT_LT(keep, frames.size()) << describe(r.snapshot);
  EXPECT_LT(alloc_cpu, keep);
  EXPECT_EQ(frames[keep].at("file"), script);
  EXPECT_EQ(frames[keep].at("line").get<int>(), source_line(script, "# site: keep_outputs"));
  const auto live = live_by_python_function(r.snapshot);
  const int64_t want = r.truth.at("python_sites").at("keep_outputs").get<int64_t>();
  int64_t got = 0;
  for (const auto& [key, bytes] : live)
    if (key.first == "keep_outputs") got += bytes;
  EXPECT_GE(got, want) << describe(r.snapshot);
  std::printf("[ figures ] torch: waited %.1f s for frames and tables; %lld bytes under keep_outputs (%lld in tensors)\n",
              r.ready_wait_s, static_cast<long long>(got), static_cast<long long>(want));
}

}  // namespace
}  // namespace lw::itest
