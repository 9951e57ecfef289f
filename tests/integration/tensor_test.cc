// SPDX-License-Identifier: Apache-2.0
// The tensor tier (issue 31, decision tensor-tier) end to end, with real
// probes: on the project's framework stand-ins (tests/targets/tensor:
// libc10.so, libc10_cuda.so with the pytorch:malloc/free USDTs and their
// semaphores, libtensorflow_framework.so.2; -O2, no frame pointers), and on
// Debian's PyTorch 1.13 (python3-torch) where it is installed.
//
// Checked: the exact bytes under each named call site in the tier's kinds
// (tensor_cpu, tensor_gpu), 0 under the sites that churn or free what
// another thread made; a tensor counted once when the heap tier is on too;
// the USDT semaphores raised while attached and lowered after; both arities
// of c10::reportMemoryUsageToProfiler giving the pool's totals (GPU memory
// explained); the BFC allocator; and the bad inputs: a known name with
// another signature ("unsupported: ..."), a libc10.so without the names.
//
// Which frame is "the site": the first frame, from the leaf, in the
// target's own executable. The stacks start inside the frameworks'
// libraries for the USDTs and the hook (pytorch:malloc fires in the
// allocator, not at its caller), so the leaf alone would not do.
#include <signal.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/accounting/heap_tracker.h"
#include "core/analysis/analyzer.h"
#include "daemon_harness.h"
#include "harness.h"

namespace lw::itest {
namespace {

using namespace std::chrono_literals;

const char *const kTarget = "tensor_leaker";

class LeakwatchTensor : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "not root";
  }
};

std::string base_name(const std::string &path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Live bytes by (site, kind); the site is the first frame in the target
// executable, or "<outside>".
std::map<std::pair<std::string, std::string>, int64_t> live_by_site(const Json &snap) {
  std::map<std::pair<std::string, std::string>, int64_t> out;
  for (const Json &site : snap.at("sites")) {
    std::string fn = "<outside>";
    for (const Json &f : site.at("frames"))
      if (base_name(f.value("module", "")) == kTarget) {
        fn = f.value("function", "<unknown>");
        break;
      }
    out[{fn, site.at("kind").get<std::string>()}] += site.at("live_bytes").get<int64_t>();
  }
  return out;
}

int64_t live_of_kind(const Json &snap, const std::string &kind) {
  int64_t bytes = 0;
  for (const Json &site : snap.at("sites"))
    if (site.at("kind") == kind) bytes += site.at("live_bytes").get<int64_t>();
  return bytes;
}

std::string context_of(const Json &snap, const std::string &diagnostics) {
  return "\ntensor=" + snap.value("tensor", Json()).dump() + "\ngpu_explained=" +
         snap.value("gpu_explained", Json()).dump() + "\n" + describe_sites(snap) + diagnostics;
}

// Every truth site's exact bytes in its kind; no bytes of the tensor kinds
// under any other function of the target.
void expect_sites_exact(const Json &snap, const Json &truth, const std::string &context) {
  const auto live = live_by_site(snap);
  for (const auto &[fn, bytes] : truth.at("sites").items()) {
    const std::string kind = truth.at("kinds").at(fn).get<std::string>();
    auto it = live.find({fn, kind});
    EXPECT_EQ(it == live.end() ? 0 : it->second, bytes.get<int64_t>()) << fn << " (" << kind << ")" << context;
  }
  for (const auto &[key, bytes] : live) {
    if (key.first == "<outside>" || truth.at("sites").contains(key.first)) continue;
    if (key.second.rfind("tensor_", 0) == 0) {
      EXPECT_EQ(bytes, 0) << key.first << " (" << key.second << ")" << context;
    }
  }
}

// Sites whose first target frame is `fn` must not be flagged.
void expect_not_flagged(const Json &snap, const std::string &fn, const std::string &context) {
  for (const Json &site : snap.at("sites"))
    for (const Json &f : site.at("frames"))
      if (base_name(f.value("module", "")) == kTarget) {
        if (f.value("function", "") == fn) {
          EXPECT_FALSE(site.at("suspected_leak").get<bool>()) << fn << " flagged" << context;
        }
        break;
      }
}

bool has_source(const Json &snap, const std::string &source) {
  for (const Json &s : snap.at("tensor").at("sources"))
    if (s == source) return true;
  return false;
}

int64_t counter_of(const Json &snap, const std::string &name) {
  const Json &c = snap.at("counters");
  return c.contains(name) ? c.at(name).get<int64_t>() : -1;
}

// The gpu_explained entry of a device (-1: unknown, null in the JSON).
const Json *gpu_device(const Json &snap, int device) {
  for (const Json &d : snap.at("gpu_explained"))
    if ((d.at("device").is_null() ? -1 : d.at("device").get<int>()) == device) return &d;
  return nullptr;
}

int64_t fact(const Json &truth, const char *name) { return truth.at("facts").at(name).get<int64_t>(); }

// GPU memory explained for device 0 against the caching allocator
// stand-in's own figures.
void expect_pool_explained(const Json &snap, const Json &truth, const std::string &context) {
  const Json *d = gpu_device(snap, 0);
  ASSERT_NE(d, nullptr) << "no gpu_explained for device 0" << context;
  const int64_t allocated = fact(truth, "pool_allocated_bytes"), reserved = fact(truth, "pool_reserved_bytes");
  ASSERT_GT(reserved, allocated) << "the stand-in must hold a cache" << context;
  EXPECT_EQ(d->at("tensors_live_bytes").get<int64_t>(), fact(truth, "tensor_gpu_bytes")) << context;
  EXPECT_TRUE(d->at("pool_totals").get<bool>()) << context;
  EXPECT_EQ(d->at("pool_allocated_bytes").get<int64_t>(), allocated) << context;
  EXPECT_EQ(d->at("pool_reserved_bytes").get<int64_t>(), reserved) << context;
  EXPECT_EQ(d->at("cached_bytes").get<int64_t>(), reserved - allocated) << context;
  EXPECT_EQ(d->at("cuda_bytes").get<int64_t>(), reserved + fact(truth, "outside_pool_bytes")) << context;
  EXPECT_EQ(d->at("outside_pool_bytes").get<int64_t>(), fact(truth, "outside_pool_bytes")) << context;
}

// Asks the target for its USDT state: {"malloc_semaphore",...}.
Json usdt_state(Process &target) {
  target.write_line("usdt");
  for (;;) {
    auto line = target.read_line(10000ms);
    if (!line) throw std::runtime_error("target ended: " + target.stderr_text());
    if (line->rfind("usdt ", 0) == 0) return Json::parse(line->substr(5));
  }
}

// Ends leakwatch top (its probes detach) and waits for it.
void stop_leakwatch(TraceSession &session) {
  kill(session.leakwatch().pid(), SIGINT);
  EXPECT_TRUE(session.leakwatch().wait_exit(30000ms).has_value()) << session.diagnostics();
}

// One run of the caching allocator stand-in of `variant`.
void check_pool_variant(const std::string &variant, bool usdt) {
  SCOPED_TRACE(variant);
  TraceSession session({.target = kTarget, .target_args = {variant, "gpu"}, .leakwatch_args = {"--top", "100"}});
  const Json &truth = session.truth();
  const Json &snap = session.snapshot();
  const std::string context = context_of(snap, session.diagnostics());
  ASSERT_TRUE(snap.contains("tensor")) << context;
  EXPECT_EQ(snap.at("tensor").at("state"), "on") << context;
  EXPECT_TRUE(has_source(snap, "pytorch_cuda_hook")) << context;
  EXPECT_EQ(has_source(snap, "pytorch_cuda_usdt"), usdt) << context;
  EXPECT_EQ(snap.at("tensor").at("gpu_allocator"), "pytorch_caching") << context;
  expect_sites_exact(snap, truth, context);
  expect_not_flagged(snap, "churn_gpu_tensors", context);
  EXPECT_EQ(live_of_kind(snap, "tensor_gpu"), fact(truth, "tensor_gpu_bytes")) << context;
  expect_pool_explained(snap, truth, context);
  EXPECT_EQ(counter_of(snap, "tensor_free_unknown"), 0) << context;

  // The semaphores: 0 before the attach, raised while attached (the
  // stand-in fired each USDT once per block malloc and free), 0 after.
  EXPECT_EQ(fact(truth, "has_usdt"), usdt ? 1 : 0);
  EXPECT_EQ(fact(truth, "semaphore_before_attach"), 0);
  if (usdt) {
    EXPECT_GE(fact(truth, "usdt_malloc_semaphore"), 1) << "pytorch:malloc's semaphore not raised" << context;
    EXPECT_GE(fact(truth, "usdt_free_semaphore"), 1) << "pytorch:free's semaphore not raised" << context;
    EXPECT_EQ(fact(truth, "usdt_malloc_fired"), fact(truth, "block_mallocs"));
    EXPECT_EQ(fact(truth, "usdt_free_fired"), fact(truth, "block_frees"));
  } else {
    EXPECT_EQ(fact(truth, "usdt_malloc_fired"), 0);
  }

  // emptyCache(): the churn's cached chunk goes back to the driver. The
  // hook is not called there (as in PyTorch), so the pool's totals are the
  // last it reported; the CUDA bytes follow cudaFree.
  session.target().write_line("empty");
  Json emptied;
  for (;;) {
    auto line = session.target().read_line(10000ms);
    ASSERT_TRUE(line) << session.target().stderr_text();
    if (line->rfind("empty ", 0) == 0) {
      emptied = Json::parse(line->substr(6));
      break;
    }
  }
  const double emptied_at = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  ASSERT_LT(emptied.at("reserved").get<int64_t>(), fact(truth, "pool_reserved_bytes")) << emptied.dump();
  Json after;
  do after = session.next_snapshot(10000ms);
  while (after.at("timestamp").get<double>() < emptied_at + 0.5);
  const Json *d = gpu_device(after, 0);
  ASSERT_NE(d, nullptr) << context_of(after, "");
  EXPECT_EQ(d->at("cuda_bytes").get<int64_t>(),
            emptied.at("reserved").get<int64_t>() + fact(truth, "outside_pool_bytes"))
      << context_of(after, "");
  EXPECT_EQ(d->at("tensors_live_bytes").get<int64_t>(), fact(truth, "tensor_gpu_bytes")) << context_of(after, "");

  stop_leakwatch(session);
  if (usdt) {
    const Json state = usdt_state(session.target());
    EXPECT_EQ(state.at("malloc_semaphore").get<int>(), 0) << "still raised after detach: " << state.dump();
    EXPECT_EQ(state.at("free_semaphore").get<int>(), 0) << "still raised after detach: " << state.dump();
  }
  session.target().write_line("exit");
}

// ---- PyTorch CPU: c10::alloc_cpu / free_cpu ----

TEST_F(LeakwatchTensor, CpuTensorsExactUnderTheirSitesInLightMode) {
  TraceSession session({.target = kTarget, .target_args = {"pt113_cpu", "cpu"}, .leakwatch_args = {"--mode", "light"}});
  const Json &snap = session.snapshot();
  const std::string context = context_of(snap, session.diagnostics());
  ASSERT_TRUE(snap.contains("tensor")) << context;
  EXPECT_EQ(snap.at("tensor").at("state"), "on") << context;
  EXPECT_TRUE(has_source(snap, "pytorch_cpu")) << context;
  const Json &gpu_allocator = snap.at("tensor").at("gpu_allocator");
  EXPECT_TRUE(gpu_allocator.is_null() || gpu_allocator == "") << "no libc10_cuda.so mapped" << context;
  expect_sites_exact(snap, session.truth(), context);
  expect_not_flagged(snap, "churn_cpu_tensors", context);
  EXPECT_EQ(live_of_kind(snap, "tensor_cpu"), fact(session.truth(), "tensor_cpu_bytes")) << context;
  // The cross-thread frees found the worker's records; free_cpu(NULL) is no free.
  EXPECT_EQ(counter_of(snap, "tensor_free_unknown"), 0) << context;
  EXPECT_TRUE(snap.at("gpu_explained").empty()) << context;
}

// With the heap tier on (top's default mode, full), the posix_memalign in
// alloc_cpu and the free in free_cpu are not recorded again: heap holds
// none of the tensors' bytes and the process total is the tensors'.
TEST_F(LeakwatchTensor, CpuTensorsCountedOnceWithTheHeapTierOn) {
  TraceSession session({.target = kTarget, .target_args = {"pt113_cpu", "cpu"}, .leakwatch_args = {"--mode", "full"}});
  const Json &snap = session.snapshot();
  const Json &truth = session.truth();
  const std::string context = context_of(snap, session.diagnostics());
  expect_sites_exact(snap, truth, context);
  const auto live = live_by_site(snap);
  for (const auto &[key, bytes] : live)
    if (key.second == "heap" && key.first != "<outside>") {
      EXPECT_EQ(bytes, 0) << key.first << " heap" << context;
    }
  EXPECT_EQ(snap.at("live_bytes").get<int64_t>(), truth.at("total_live").get<int64_t>()) << context;
  // Every alloc_cpu (2032, but alloc_cpu(0)) and free_cpu (2007) call nested
  // one libc call.
  EXPECT_GE(counter_of(snap, "tensor_nested_skipped"), 2 * 2000) << context;
  EXPECT_EQ(counter_of(snap, "tensor_free_unknown"), 0) << context;
}

// Turned off (top --no-tensors; the config's per-target `tensors: false`):
// state "off", no tensor kinds, and the heap tier counts the tensors'
// posix_memalign calls instead, under the same sites.
TEST_F(LeakwatchTensor, TurnedOffTheHeapTierCountsTheTensorsInstead) {
  TraceSession session({.target = kTarget,
                        .target_args = {"pt113_cpu", "cpu"},
                        .leakwatch_args = {"--mode", "full", "--no-tensors"}});
  const Json &snap = session.snapshot();
  const Json &truth = session.truth();
  const std::string context = context_of(snap, session.diagnostics());
  ASSERT_TRUE(snap.contains("tensor")) << context;
  EXPECT_EQ(snap.at("tensor").at("state"), "off") << context;
  EXPECT_TRUE(snap.at("tensor").at("sources").empty()) << context;
  EXPECT_EQ(live_of_kind(snap, "tensor_cpu"), 0) << context;
  const auto live = live_by_site(snap);
  for (const char *fn : {"keep_cpu_tensors", "make_cpu_tensors_on_worker", "churn_cpu_tensors"}) {
    auto it = live.find({fn, "heap"});
    EXPECT_EQ(it == live.end() ? 0 : it->second, truth.at("sites").at(fn).get<int64_t>()) << fn << context;
  }
  EXPECT_EQ(snap.at("live_bytes").get<int64_t>(), truth.at("total_live").get<int64_t>()) << context;
}

// ---- PyTorch CUDA caching allocator: USDTs and the profiler hook ----

TEST_F(LeakwatchTensor, PyTorch2UsdtsRecordTensorsTheCurrentArityHookThePool) { check_pool_variant("pt2", true); }

TEST_F(LeakwatchTensor, PyTorch113HookOfItsArityRecordsTensorsAndPool) { check_pool_variant("pt113", false); }

TEST_F(LeakwatchTensor, CurrentArityHookWithoutUsdtsRecordsTensorsAndPool) {
  check_pool_variant("pt2_nousdt", false);
}

// ---- TensorFlow's BFC allocator ----

TEST_F(LeakwatchTensor, BfcTensorsUnderTheirSiteAsTensorGpu) {
  TraceSession session({.target = kTarget, .target_args = {"tf", "bfc"}});
  const Json &snap = session.snapshot();
  const Json &truth = session.truth();
  const std::string context = context_of(snap, session.diagnostics());
  ASSERT_TRUE(snap.contains("tensor")) << context;
  EXPECT_EQ(snap.at("tensor").at("state"), "on") << context;
  EXPECT_TRUE(has_source(snap, "tensorflow_bfc")) << context;
  EXPECT_EQ(snap.at("tensor").at("gpu_allocator"), "tensorflow_bfc") << context;
  expect_sites_exact(snap, truth, context);
  expect_not_flagged(snap, "churn_bfc_tensors", context);
  // The BFC entry points say nothing of the device: unknown (null), and no
  // pool totals.
  int64_t tensors = 0;
  for (const Json &d : snap.at("gpu_explained")) {
    tensors += d.at("tensors_live_bytes").get<int64_t>();
    EXPECT_FALSE(d.at("pool_totals").get<bool>()) << context;
  }
  EXPECT_EQ(tensors, fact(truth, "bfc_bytes")) << context;
  const Json *unknown = gpu_device(snap, -1);
  ASSERT_NE(unknown, nullptr) << context;
  EXPECT_EQ(unknown->at("tensors_live_bytes").get<int64_t>(), fact(truth, "bfc_bytes")) << context;
}

// The GPU allocator path each process uses, from its environment and its
// libraries: the settings that give one CUDA call per tensor (traced as
// cuda_device) are named apart from the pools.
TEST_F(LeakwatchTensor, GpuAllocatorPathFromEnvironmentAndLibraries) {
  struct Case {
    const char *variant;
    std::string env;
    const char *path;
  };
  const Case cases[] = {
      {"pt2", "", "pytorch_caching"},
      {"pt2", "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True,backend:cudaMallocAsync", "pytorch_cuda_malloc_async"},
      {"pt2", "PYTORCH_NO_CUDA_MEMORY_CACHING=1", "pytorch_uncached"},
      {"tf", "", "tensorflow_bfc"},
      {"tf", "TF_GPU_ALLOCATOR=cuda_malloc_async", "tensorflow_cuda_malloc_async"},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(std::string(c.variant) + " " + c.env);
    TraceOptions options{.target = kTarget, .target_args = {c.variant, "none"}, .leakwatch_args = {"--mode", "light"}};
    if (!c.env.empty()) options.target_env = {c.env};
    TraceSession session(options);
    const Json &tensor = session.snapshot().at("tensor");
    EXPECT_EQ(tensor.at("gpu_allocator"), c.path) << tensor.dump();
    EXPECT_EQ(tensor.at("state"), "on") << tensor.dump();
  }
}

// ---- bad input ----

// A known name with a signature no PyTorch has: refused with a reason,
// never a figure; the heap tier still counts the bytes (nothing skipped).
TEST_F(LeakwatchTensor, AnotherSignatureIsUnsupportedWithAReason) {
  TraceSession session({.target = kTarget, .target_args = {"c10_bad", "bad"}, .leakwatch_args = {"--mode", "full"}});
  const Json &snap = session.snapshot();
  const std::string context = context_of(snap, session.diagnostics());
  ASSERT_TRUE(snap.contains("tensor")) << context;
  const Json &tensor = snap.at("tensor");
  EXPECT_EQ(tensor.at("state"), "unsupported") << context;
  const std::string reason = tensor.at("reason").get<std::string>();
  EXPECT_NE(reason.find("unsupported: "), std::string::npos) << reason;
  EXPECT_NE(reason.find("libc10.so"), std::string::npos) << reason;
  EXPECT_NE(reason.find("c10::alloc_cpu(unsigned long, int)"), std::string::npos) << reason;
  EXPECT_TRUE(tensor.at("sources").empty()) << context;
  EXPECT_EQ(live_of_kind(snap, "tensor_cpu"), 0) << context;
  const auto live = live_by_site(snap);
  auto heap = live.find({"keep_cpu_tensors_bad", "heap"});
  EXPECT_EQ(heap == live.end() ? 0 : heap->second, fact(session.truth(), "bad_kept_bytes")) << context;
}

// A libc10.so whose .dynsym lacks the names: no tier, and why.
TEST_F(LeakwatchTensor, LibraryWithoutTheNamesGetsNoTierAndAReason) {
  TraceSession session({.target = kTarget, .target_args = {"c10_nosyms", "none"}, .leakwatch_args = {"--mode", "light"}});
  const Json &snap = session.snapshot();
  const std::string context = context_of(snap, session.diagnostics());
  ASSERT_TRUE(snap.contains("tensor")) << context;
  EXPECT_NE(snap.at("tensor").at("state"), "on") << context;
  const std::string reason = snap.at("tensor").at("reason").get<std::string>();
  EXPECT_NE(reason.find("libc10.so"), std::string::npos) << reason;
  EXPECT_NE(reason.find(".dynsym"), std::string::npos) << reason;
  EXPECT_TRUE(snap.at("tensor").at("sources").empty()) << context;
}

// ---- the daemon: default config (mode auto), the API's gpu_explained ----

TEST_F(LeakwatchTensor, DaemonDefaultConfigApiShowsTensorsAndGpuExplained) {
  Process target({target_path(kTarget), "pt2", "cpu", "gpu"});
  const pid_t pid = read_ready(target);
  DaemonProcess daemon({.config_body = "top_sites_per_process: 200\n"
                                       "targets:\n"
                                       "  - name: torch\n"
                                       "    match: {pids: [" + std::to_string(pid) + "]}\n"});
  daemon.wait_notify("READY=1", 20000ms);
  daemon.wait_for_process(pid, 10000ms);
  // The stand-ins have no frame pointers: their stacks need the unwind
  // tables, built off the event path; start the work once they are in.
  daemon.wait_for_status(
      [](const Json &s) {
        const Json &u = s.at("unwind");
        return u.at("objects").at("pending").get<int64_t>() == 0 && u.value("queue_depth", 0) == 0;
      },
      60000ms, "unwind tables built");
  const Json truth = go_and_read_truth(target);
  const Json sites = daemon.sites_at_or_after(pid, unix_now() + 0.5, 20000ms);
  const std::string context = context_of(sites, daemon.diagnostics());
  ASSERT_TRUE(sites.contains("tensor")) << context;
  EXPECT_EQ(sites.at("tensor").at("state"), "on") << context;
  for (const char *source : {"pytorch_cpu", "pytorch_cuda_hook"})
    EXPECT_TRUE(has_source(sites, source)) << source << context;
  // The sandboxed daemon cannot attach perf-event uprobes (libbpf 1.1's
  // USDTs need CAP_SYS_ADMIN on this kernel): the hook then records the
  // tensors, and the reason says so (decision tensor-tier).
  if (!has_source(sites, "pytorch_cuda_usdt")) {
    EXPECT_NE(sites.at("tensor").at("reason").get<std::string>().find("USDTs not attached"), std::string::npos)
        << context;
  }
  expect_sites_exact(sites, truth, context);
  expect_pool_explained(sites, truth, context);

  // The metrics: the tier's kinds per process, its state, and GPU memory
  // explained per device (docs/metrics.md).
  const std::string metrics = daemon.get("/metrics").body;
  const std::string p = "pid=\"" + std::to_string(pid) + "\"";
  // The value of the first sample of `name` for this process with `label`, or "".
  auto sample = [&](const std::string &name, const std::string &label) {
    std::istringstream in(metrics);
    for (std::string line; std::getline(in, line);)
      if (line.rfind(name + "{", 0) == 0 && line.find(p) != std::string::npos && line.find(label) != std::string::npos)
        return line.substr(line.rfind(' ') + 1);
    return std::string();
  };
  EXPECT_EQ(sample("leakwatch_process_live_bytes", "kind=\"tensor_cpu\""),
            std::to_string(fact(truth, "tensor_cpu_bytes")));
  EXPECT_EQ(sample("leakwatch_process_live_bytes", "kind=\"tensor_gpu\""),
            std::to_string(fact(truth, "tensor_gpu_bytes")));
  EXPECT_EQ(sample("leakwatch_process_tensor_tier_info", "state=\"on\""), "1");
  const std::string dev0 = "device=\"0\"";
  EXPECT_EQ(sample("leakwatch_process_gpu_tensor_bytes", dev0), std::to_string(fact(truth, "tensor_gpu_bytes")));
  EXPECT_EQ(sample("leakwatch_process_gpu_pool_reserved_bytes", dev0),
            std::to_string(fact(truth, "pool_reserved_bytes")));
  EXPECT_EQ(sample("leakwatch_process_gpu_pool_cached_bytes", dev0),
            std::to_string(fact(truth, "pool_reserved_bytes") - fact(truth, "pool_allocated_bytes")));
  EXPECT_EQ(sample("leakwatch_process_gpu_outside_pool_bytes", dev0), std::to_string(fact(truth, "outside_pool_bytes")));
  target.write_line("exit");
}

// The per-target switch: `tensors: false` turns the tier off for that
// target only ("off", no tensor kinds); the other target keeps it.
TEST_F(LeakwatchTensor, DaemonTensorsFalseTurnsTheTierOffForItsTargetOnly) {
  Process off_target({target_path(kTarget), "pt113_cpu", "cpu"});
  Process on_target({target_path(kTarget), "pt113_cpu", "cpu"});
  const pid_t off_pid = read_ready(off_target), on_pid = read_ready(on_target);
  DaemonProcess daemon({.config_body = "targets:\n"
                                       "  - name: off\n"
                                       "    match: {pids: [" + std::to_string(off_pid) + "]}\n"
                                       "    tensors: false\n"
                                       "  - name: on\n"
                                       "    match: {pids: [" + std::to_string(on_pid) + "]}\n"});
  daemon.wait_notify("READY=1", 20000ms);
  daemon.wait_for_process(off_pid, 10000ms);
  daemon.wait_for_process(on_pid, 10000ms);
  go_and_read_truth(off_target);
  const Json on_truth = go_and_read_truth(on_target);
  const double done_at = unix_now();
  const Json off = daemon.sites_at_or_after(off_pid, done_at + 0.5, 20000ms);
  const Json on = daemon.sites_at_or_after(on_pid, done_at + 0.5, 20000ms);
  EXPECT_EQ(off.at("tensor").at("state"), "off") << context_of(off, daemon.diagnostics());
  EXPECT_EQ(live_of_kind(off, "tensor_cpu"), 0) << context_of(off, "");
  EXPECT_EQ(on.at("tensor").at("state"), "on") << context_of(on, daemon.diagnostics());
  EXPECT_EQ(live_of_kind(on, "tensor_cpu"), fact(on_truth, "tensor_cpu_bytes")) << context_of(on, "");
  off_target.write_line("exit");
  on_target.write_line("exit");
}

// Whether this kernel has uprobe sessions (6.13 and later).
bool kernel_has_sessions() {
  struct utsname u {};
  int major = 0, minor = 0;
  return uname(&u) == 0 && sscanf(u.release, "%d.%d", &major, &minor) == 2 &&
         (major > 6 || (major == 6 && minor >= 13));
}

// The alloc_cpu probe's placement as /api/v1/status lists it.
std::string alloc_cpu_placement(const Json &status) {
  for (const Json &p : status.at("probes"))
    if (p.at("symbols").get<std::string>().find("alloc_cpu") != std::string::npos)
      return p.at("placement").get<std::string>() + (p.at("attached").get<bool>() ? "" : " (not attached)");
  return "<no alloc_cpu probe>";
}

// The tensor allocators' entry and return as one uprobe session where the
// kernel has them (decision tensor-tier, "Uprobe sessions": the return is
// skipped for alloc_cpu(0)), and as an entry plus a return probe where it
// has not, or with LW_BENCH_NO_UPROBE_SESSIONS: the same exact bytes both ways.
TEST_F(LeakwatchTensor, DaemonTensorsExactWithAndWithoutUprobeSessions) {
  for (const bool sessions : {true, false}) {
    SCOPED_TRACE(sessions ? "uprobe sessions" : "LW_BENCH_NO_UPROBE_SESSIONS");
    Process target({target_path(kTarget), "pt113_cpu", "cpu"});
    const pid_t pid = read_ready(target);
    DaemonProcess daemon({.config_body = "targets:\n  - name: t\n    match: {pids: [" + std::to_string(pid) +
                                         "]}\n    mode: light\n",
                          .env = sessions ? std::vector<std::string>{}
                                          : std::vector<std::string>{"LW_BENCH_NO_UPROBE_SESSIONS=1"}});
    daemon.wait_notify("READY=1", 20000ms);
    daemon.wait_for_process(pid, 10000ms);
    const std::string placement = alloc_cpu_placement(daemon.get_json("/api/v1/status"));
    if (sessions && kernel_has_sessions())
      EXPECT_NE(placement.find("uprobe session"), std::string::npos) << placement;
    else
      EXPECT_EQ(placement.find("uprobe session"), std::string::npos) << placement;
    EXPECT_EQ(placement.find("not attached"), std::string::npos) << placement;
    const Json truth = go_and_read_truth(target);
    const Json sites = daemon.sites_at_or_after(pid, unix_now() + 0.5, 20000ms);
    const std::string context = context_of(sites, daemon.diagnostics());
    EXPECT_EQ(live_of_kind(sites, "tensor_cpu"), fact(truth, "tensor_cpu_bytes")) << context;
    expect_sites_exact(sites, truth, context);
    EXPECT_EQ(counter_of(sites, "tensor_free_unknown"), 0) << context;
    EXPECT_EQ(counter_of(sites, "alloc_failed"), 0) << "alloc_cpu(0) is no failure" << context;
    target.write_line("exit");
  }
}

// The tier's own governor budget (governor.max_tensor_hits_per_second),
// apart from the heap's: a process making tensors without end goes over
// 1,000 hits/s and has the tier suspended ("suspended"), the process still
// traced; the heap budget (max_hits_per_second) is not what suspends it.
TEST_F(LeakwatchTensor, DaemonTierOverItsOwnBudgetIsSuspended) {
  Process target({target_path(kTarget), "pt113_cpu", "spin"});
  const pid_t pid = read_ready(target);
  DaemonProcess daemon({.config_body = "governor: {max_tensor_hits_per_second: 1000, max_hits_per_second: 0}\n"
                                       "targets:\n"
                                       "  - name: spin\n"
                                       "    match: {pids: [" + std::to_string(pid) + "]}\n"});
  daemon.wait_notify("READY=1", 20000ms);
  daemon.wait_for_process(pid, 10000ms);
  target.write_line("go");
  Json sites;
  const bool suspended = wait_until(20000ms, [&] {
    sites = daemon.get_json("/api/v1/processes/" + std::to_string(pid) + "/sites");
    return sites.contains("tensor") && sites.at("tensor").at("state") == "suspended";
  }, 200ms);
  target.write_line("stop");
  EXPECT_TRUE(suspended) << sites.value("tensor", Json()).dump() << daemon.diagnostics();
  EXPECT_NE(sites.at("tensor").at("reason").get<std::string>().find("max_tensor_hits_per_second"), std::string::npos)
      << sites.at("tensor").dump();
  EXPECT_EQ(kill(pid, 0), 0);
  EXPECT_EQ(daemon.get("/api/v1/processes/" + std::to_string(pid) + "/sites").status, 200);
  target.write_line("exit");
}

// ---- Debian's PyTorch 1.13 (python3-torch), CPU ----

double now_s() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

// Live bytes by (innermost Python frame's function, kind).
std::map<std::pair<std::string, std::string>, int64_t> live_by_python_function(const Json &snap) {
  std::map<std::pair<std::string, std::string>, int64_t> out;
  for (const Json &site : snap.at("sites")) {
    std::string fn = "<no python frame>";
    for (const Json &f : site.at("frames"))
      if (f.value("language", "") == "python") {
        fn = f.at("function").get<std::string>();
        break;
      }
    out[{fn, site.at("kind").get<std::string>()}] += site.at("live_bytes").get<int64_t>();
  }
  return out;
}

std::string describe_python(const Json &snap) {
  std::string out = "python=" + snap.value("python", Json()).dump() + " tensor=" + snap.value("tensor", Json()).dump() + "\n";
  int n = 0;
  for (const Json &site : snap.at("sites")) {
    if (++n > 16) break;
    out += "  " + site.value("kind", "?") + " live=" + site.at("live_bytes").dump() + ":";
    for (const Json &f : site.at("frames")) {
      const std::string fn = f.value("function", "?");
      out += f.value("language", "") == "python" ? " [py " + fn + "]" : " " + fn;
    }
    out += "\n";
  }
  return out;
}

// keep_tensors keeps 40 x 64 KiB, churn_tensors makes and drops 2000,
// make_in_thread (another thread) makes 6 x 32 KiB of which the main thread
// drops 5: exact bytes in tensor_cpu under each Python function.
TEST(LeakwatchTensorTorch, CpuTensorsExactUnderTheirPythonFunctions) {
  if (geteuid() != 0) GTEST_SKIP() << "not root";
  if (system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "PyTorch is not installed for /usr/bin/python3 (Debian's python3-torch: "
                    "scripts/install-deps.sh --with-bench-tools); CI does not install it";
  const std::string script = std::string(LW_SOURCE_DIR) + "/tests/targets/python/torch_tensors.py";
  Process target({"/usr/bin/python3", script});
  auto ready = target.read_line(180000ms);
  ASSERT_TRUE(ready && *ready == "ready " + std::to_string(target.pid())) << target.stderr_text();
  Process leakwatch({LW_LEAKWATCH_BIN, "top", "-p", std::to_string(target.pid()), "--json", "--interval", "0.2",
                     "--top", "100"});
  // Python frames read and unwind tables built (libtorch maps ~300
  // objects: a minute or more on a loaded machine), then the work.
  const double start = now_s();
  Json attach;
  for (;;) {
    attach = next_json(leakwatch, 60);
    const Json &py = attach.at("python");
    const Json &u = attach.at("unwind");
    const bool tables = u.at("objects").at("pending").get<int64_t>() == 0 && u.at("queue_depth").get<int64_t>() == 0;
    if ((!py.is_null() && py.at("frames").get<bool>() && tables) || now_s() - start > 90) break;
  }
  ASSERT_EQ(attach.at("tensor").at("state"), "on") << describe_python(attach);
  EXPECT_TRUE(has_source(attach, "pytorch_cpu")) << describe_python(attach);
  target.write_line("go");
  std::optional<std::string> done;
  do {
    while (!target.line_ready(50ms)) leakwatch.drain();
    done = target.read_line(10000ms);
    ASSERT_TRUE(done) << target.stderr_text();
  } while (done->rfind("done ", 0) != 0);
  const double done_at = now_s();
  const Json truth = Json::parse(done->substr(5));
  Json snap;
  do snap = next_json(leakwatch, 60);
  while (snap.at("timestamp").get<double>() < done_at + 0.6);
  const auto live = live_by_python_function(snap);
  auto at = [&](const std::string &fn) {
    auto it = live.find({fn, "tensor_cpu"});
    return it == live.end() ? int64_t{0} : it->second;
  };
  for (const char *fn : {"keep_tensors", "churn_tensors", "make_in_thread"})
    EXPECT_EQ(at(fn), truth.at("python_sites").at(fn).get<int64_t>()) << fn << "\n" << describe_python(snap);
  EXPECT_EQ(truth.at("python_sites").at("keep_tensors").get<int64_t>(), 40 * 65536);
  // Counted once (top's default mode, full, has the heap tier on): the heap
  // under keep_tensors holds the tensors' small C++ objects, not their data.
  auto heap = live.find({"keep_tensors", "heap"});
  const int64_t heap_bytes = heap == live.end() ? 0 : heap->second;
  EXPECT_LT(heap_bytes, 40 * 65536 / 4) << describe_python(snap);
  for (const Json &site : snap.at("sites"))
    for (const Json &f : site.at("frames"))
      if (f.value("language", "") == "python") {
        if (f.at("function") == "churn_tensors") {
          EXPECT_FALSE(site.at("suspected_leak").get<bool>()) << site.dump();
        }
        break;
      }
  EXPECT_EQ(counter_of(snap, "tensor_free_unknown"), 0) << describe_python(snap);
  std::printf("[ figures ] torch: %lld bytes in tensor_cpu under keep_tensors (%lld kept), %lld in heap\n",
              static_cast<long long>(at("keep_tensors")),
              static_cast<long long>(truth.at("python_sites").at("keep_tensors").get<int64_t>()),
              static_cast<long long>(heap_bytes));
  target.write_line("exit");
}

}  // namespace
}  // namespace lw::itest

namespace lw {
namespace {

// The leak analysis treats the tensor kinds as it treats the heap (pure, no
// root: fed with events as the kernel sends them). Over 10 simulated
// minutes, a site that keeps a 64 KiB CPU tensor every 10 s is a leak; a
// site whose GPU tensors are freed a second after they are made, however
// many, is not, and neither is the process's tensor_gpu.
TEST(TensorLeakAnalysis, KeptTensorsAreALeakChurnIsNot) {
  HeapTracker heap;
  ProcessAnalyzer analyzer;
  const uint64_t s = 1000000000ull;
  const uint64_t base = 1000 * s;
  uint64_t leak_addr = 0x7f0000000000ull, churn_addr = 0x7e0000000000ull;
  const uint16_t dev0 = 1 << LW_EVF_DEVICE_SHIFT;
  for (int i = 0; i <= 60; ++i) {
    const uint64_t now = base + static_cast<uint64_t>(i) * 10 * s;
    heap.apply(Event{EventType::kAlloc, 0, 1, 1, LW_KIND_TENSOR_CPU, now, leak_addr, 64 << 10, now, 21});
    leak_addr += 64 << 10;
    for (int j = 0; j < 50; ++j) {
      heap.apply(Event{EventType::kAlloc, dev0, 1, 1, LW_KIND_TENSOR_GPU, now, churn_addr, 1 << 20, now, 22});
      heap.apply(Event{EventType::kFree, dev0, 1, 1, LW_KIND_TENSOR_GPU, now + s, churn_addr, 1 << 20, now, 0});
      churn_addr += 1 << 20;
    }
    analyzer.sample(heap, static_cast<double>(now) / 1e9, now + 2 * s);
  }
  const SiteAnalysis *leak = analyzer.site(21, LW_KIND_TENSOR_CPU);
  ASSERT_NE(leak, nullptr);
  EXPECT_TRUE(leak->verdict.suspected_leak) << "rate " << leak->verdict.rate_bytes_per_s;
  EXPECT_TRUE(analyzer.process_verdict(LW_KIND_TENSOR_CPU).suspected_leak);
  const SiteAnalysis *churn = analyzer.site(22, LW_KIND_TENSOR_GPU);
  if (churn) {
    EXPECT_FALSE(churn->verdict.suspected_leak) << "rate " << churn->verdict.rate_bytes_per_s;
  }
  EXPECT_FALSE(analyzer.process_verdict(LW_KIND_TENSOR_GPU).suspected_leak);
  EXPECT_FALSE(analyzer.process_verdict(LW_KIND_HEAP).suspected_leak);
}

}  // namespace
}  // namespace lw
