// SPDX-License-Identifier: Apache-2.0
// The stack map's collection with real probes (decision stack-map-gc
// (stack GC)): stack_churn uses 48 new stacks a round against a 64-entry
// stack map. Collected, every round's stacks are stored (stack_map_full
// stays 0), the block held from the start keeps its stack and bytes, and a
// stack collected and stored again resolves to its own frames. The control,
// collection off, fills the map in the second round.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <string>

#include "engine/snapshot.h"
#include "engine/tracer.h"
#include "tests/integration/harness.h"

namespace lw {
namespace {

using namespace std::chrono_literals;
using itest::Process;

constexpr uint32_t kStackMapEntries = 64;
constexpr unsigned kStacksPerRound = 48;
constexpr unsigned kRounds = 5;
constexpr int kLevels = 15;  // tests/targets/stack_churn.c STACK_LEVELS

// Polls until `done` or `timeout`; returns whether `done` held.
template <typename F>
bool poll_until(Tracer& t, std::chrono::milliseconds timeout, F&& done) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    Result<int> n = t.poll(50);
    if (!n.ok()) return false;
    if (done()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
  }
}

// Sends `line` and waits for the target's "ok", consuming events meanwhile.
void command(Tracer& t, Process& target, const std::string& line) {
  target.write_line(line);
  ASSERT_TRUE(poll_until(t, 10s, [&] { return target.line_ready(0ms); })) << line;
  auto reply = target.read_line(1s);
  ASSERT_TRUE(reply && *reply == "ok") << line << ": " << reply.value_or("EOF") << target.stderr_text();
}

struct Traced {
  std::unique_ptr<Tracer> tracer;
  std::unique_ptr<Process> target;
};

Traced start(uint32_t grace_ms, uint32_t stack_map_entries = kStackMapEntries) {
  Traced r;
  BpfOptions o;
  o.stack_max_entries = stack_map_entries;
  o.stack_gc_grace_ms = grace_ms;  // passes every 100 ms at 400
  auto tracer = Tracer::create(o);
  EXPECT_TRUE(tracer.ok()) << tracer.error().message;
  if (!tracer.ok()) return r;
  r.tracer = std::move(*tracer);
  r.target = std::make_unique<Process>(std::vector<std::string>{itest::target_path("stack_churn")});
  auto ready = r.target->read_line(10s);
  EXPECT_TRUE(ready && ready->rfind("ready ", 0) == 0);
  EXPECT_TRUE(r.tracer->attach(r.target->pid()).ok());
  // Whole stacks (not cut at a table still loading) make the distinct stacks.
  std::atomic<bool> stop{false};
  Result<bool> tables = r.tracer->wait_for_tables(10s, stop);
  EXPECT_TRUE(tables.ok() && *tables);
  return r;
}

uint64_t stack_map_full(Tracer& t) { return t.counters()[LW_CNT_STACK_MAP_FULL]; }

TEST(StackMapGc, CollectedMapKeepsStoringNewStacksAndLiveOnes) {
  if (geteuid() != 0) GTEST_SKIP() << "not root";
  const auto t0 = std::chrono::steady_clock::now();
  Traced run = start(400);
  ASSERT_TRUE(run.tracer && run.target);
  Tracer& t = *run.tracer;
  Process& target = *run.target;
  command(t, target, "go");
  for (unsigned round = 0; round < kRounds; ++round) {
    const uint64_t before = t.stats().stacks_collected;
    command(t, target, "round " + std::to_string(round) + " " + std::to_string(kStacksPerRound));
    // This round's stacks go once their grace is over.
    ASSERT_TRUE(poll_until(t, 5s, [&] { return t.stats().stacks_collected >= before + kStacksPerRound; }))
        << "round " << round << ": collected " << t.stats().stacks_collected - before
        << ", stack_map_full " << stack_map_full(t) << ", stored " << t.stats().stack_map_entries;
    EXPECT_EQ(stack_map_full(t), 0u) << "round " << round;
  }
  EXPECT_LE(t.stats().stack_map_entries, kStackMapEntries);
  EXPECT_GE(t.stats().stacks_collected, uint64_t{kRounds} * kStacksPerRound);
  // Stack 5 was round 0's and was collected: stored again by this block.
  const unsigned path = 5;
  command(t, target, "hold " + std::to_string(path));
  // Past another grace period: a pass that wrongly took live stacks would have.
  (void)poll_until(t, 700ms, [] { return false; });
  EXPECT_EQ(stack_map_full(t), 0u);

  TracedProcess* proc = t.process(target.pid());
  ASSERT_NE(proc, nullptr);
  // keep_block's stack is still in the kernel map after five rounds of
  // collection: it was live all along.
  uint64_t keep_hash = 0;
  for (const SiteStats& s : proc->heap.sites())
    if (s.live_bytes == 4242) keep_hash = s.stack_hash;
  ASSERT_GT(keep_hash, 2u);
  EXPECT_FALSE(t.session().read_stack(keep_hash).frames.empty());

  (void)take_snapshot(t, *proc, 1000, false);
  (void)t.wait_for_symbols(10s);
  const ProcessSnapshot snap = take_snapshot(t, *proc, 1000, false);
  const SiteSnapshot* keep = nullptr;
  const SiteSnapshot* held = nullptr;
  for (const SiteSnapshot& s : snap.sites) {
    if (s.kind != LW_KIND_HEAP || s.frames.empty()) continue;
    if (s.frames[0].function == "keep_block") keep = &s;
    if (s.frames[0].function == "churn_block") held = &s;
  }
  ASSERT_NE(keep, nullptr);
  EXPECT_EQ(keep->live_bytes, 4242u);
  EXPECT_EQ(keep->live_allocations, 1u);
  ASSERT_NE(held, nullptr);
  EXPECT_EQ(held->live_bytes, 3131u);
  // Its own frames: the step functions leaf first, bit 14 down to bit 0.
  std::string want, got;
  for (int level = kLevels - 1; level >= 0; --level) want += (path >> level) & 1u ? 'b' : 'a';
  for (const Frame& f : held->frames) {
    if (f.function == "step_a") got += 'a';
    if (f.function == "step_b") got += 'b';
  }
  EXPECT_EQ(got, want);
  target.write_line("exit");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[ measure  ] %u rounds of %u stacks, 64-entry map: collected %llu, restored %llu, stored %llu, "
              "stack_map_full %llu, %.1f s\n",
              kRounds, kStacksPerRound, static_cast<unsigned long long>(t.stats().stacks_collected),
              static_cast<unsigned long long>(t.stats().stacks_restored),
              static_cast<unsigned long long>(t.stats().stack_map_entries),
              static_cast<unsigned long long>(stack_map_full(t)), seconds);
}

// A map bigger than one pass walks (Tracer::kStackKeysPerPass, 16,384):
// walked a slice a pass, every stack is still met and collected, and the
// live one kept.
TEST(StackMapGc, BigMapCollectedASliceAPass) {
  if (geteuid() != 0) GTEST_SKIP() << "not root";
  constexpr uint32_t kStacks = 1u << kLevels;  // 32,768
  Traced run = start(400, kStacks + 1024);
  ASSERT_TRUE(run.tracer && run.target);
  Tracer& t = *run.tracer;
  Process& target = *run.target;
  command(t, target, "go");
  command(t, target, "round 0 " + std::to_string(kStacks));
  EXPECT_EQ(stack_map_full(t), 0u);
  // 1,024 a pass, a pass every 100 ms: 32 passes and the grace.
  ASSERT_TRUE(poll_until(t, 15s, [&] { return t.stats().stacks_collected >= kStacks; }))
      << "collected " << t.stats().stacks_collected;
  // The walk's end counts what is left: keep_block's stack and the arena's.
  ASSERT_TRUE(poll_until(t, 3s, [&] { return t.stats().stack_map_entries <= 4; }))
      << "stored " << t.stats().stack_map_entries;
  TracedProcess* proc = t.process(target.pid());
  ASSERT_NE(proc, nullptr);
  uint64_t keep_hash = 0;
  for (const SiteStats& s : proc->heap.sites())
    if (s.live_bytes == 4242) keep_hash = s.stack_hash;
  ASSERT_GT(keep_hash, 2u);
  EXPECT_FALSE(t.session().read_stack(keep_hash).frames.empty());
  std::printf("[ measure  ] %u stacks on a %u-entry map, a slice a pass: collected %llu, stored %llu\n", kStacks,
              kStacks + 1024, static_cast<unsigned long long>(t.stats().stacks_collected),
              static_cast<unsigned long long>(t.stats().stack_map_entries));
  target.write_line("exit");
}

// The control: the same load with collection off fills the map.
TEST(StackMapGc, WithoutCollectionTheMapFills) {
  if (geteuid() != 0) GTEST_SKIP() << "not root";
  Traced run = start(0);
  ASSERT_TRUE(run.tracer && run.target);
  Tracer& t = *run.tracer;
  Process& target = *run.target;
  command(t, target, "go");
  for (unsigned round = 0; round < 2; ++round)
    command(t, target, "round " + std::to_string(round) + " " + std::to_string(kStacksPerRound));
  (void)poll_until(t, 300ms, [] { return false; });  // the last events
  EXPECT_GT(stack_map_full(t), 0u);
  EXPECT_EQ(t.stats().stacks_collected, 0u);
  target.write_line("exit");
}

// The pass's kernel work at the default map size, measured: walking the
// keys of a full 16,384-entry map, copying and deleting one pass's worth.
TEST(StackMapGc, PassCostOnAFullDefaultMap) {
  if (geteuid() != 0) GTEST_SKIP() << "not root";
  BpfOptions o;
  o.stack_gc_grace_ms = 0;  // the test deletes itself
  auto created = Tracer::create(o);
  ASSERT_TRUE(created.ok()) << created.error().message;
  Tracer& t = **created;
  Process target({itest::target_path("stack_churn")});
  auto ready = target.read_line(10s);
  ASSERT_TRUE(ready && ready->rfind("ready ", 0) == 0);
  ASSERT_TRUE(t.attach(target.pid()).ok());
  std::atomic<bool> stop{false};
  ASSERT_TRUE(t.wait_for_tables(10s, stop).ok());
  command(t, target, "go");
  command(t, target, "round 0 16384");  // every stack the target has, and more than fit
  (void)poll_until(t, 300ms, [] { return false; });
  BpfSession& session = t.session();
  auto timed = [](auto&& fn) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  std::optional<Result<std::vector<uint64_t>>> walked;
  bool end = false;
  const double walk_ms = timed([&] { walked.emplace(session.stack_hashes(nullptr, 1u << 20, end)); });
  Result<std::vector<uint64_t>>& stored = *walked;
  ASSERT_TRUE(stored.ok());
  EXPECT_TRUE(end);
  // The same walk in slices of 4,096, each going on after the last.
  std::vector<uint64_t> sliced;
  end = false;
  for (int slice = 0; slice < 10 && !end; ++slice) {
    Result<std::vector<uint64_t>> part =
        session.stack_hashes(sliced.empty() ? nullptr : &sliced.back(), 4096, end);
    ASSERT_TRUE(part.ok());
    sliced.insert(sliced.end(), part->begin(), part->end());
  }
  EXPECT_EQ(sliced, *stored);
  // Full (the target's 16,384 stacks, its keep_block and its arena's):
  // the count is exact near the limit even with per-CPU counting.
  EXPECT_EQ(stored->size(), 16384u);
  EXPECT_GT(stack_map_full(t), 0u);
  const std::vector<uint64_t> doomed(stored->begin(), stored->begin() + 1024);
  std::vector<lw_stack> copies(doomed.size());
  const double copy_ms = timed([&] {
    for (size_t i = 0; i < doomed.size(); ++i) ASSERT_TRUE(session.read_raw_stack(doomed[i], copies[i]));
  });
  size_t deleted = 0;
  const double delete_ms = timed([&] { deleted = session.delete_stacks(doomed); });
  EXPECT_EQ(deleted, doomed.size());
  Result<std::vector<uint64_t>> after = session.stack_hashes(nullptr, 1u << 20, end);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->size(), stored->size() - 1024u);
  // A deleted key again: skipped, the others still go.
  EXPECT_EQ(session.delete_stacks({doomed[0], (*after)[0], (*after)[1]}), 2u);
  EXPECT_TRUE(session.restore_stack(doomed[0], copies[0]));
  EXPECT_FALSE(session.restore_stack(doomed[0], copies[0]));  // stored already
  EXPECT_FALSE(session.read_stack(doomed[0]).frames.empty());
  std::printf("[ measure  ] full 16384-entry stack map: key walk %.2f ms, 1024 copies %.2f ms, "
              "1024 batched deletes %.2f ms\n",
              walk_ms, copy_ms, delete_ms);
  target.write_line("exit");
}

}  // namespace
}  // namespace lw
