// SPDX-License-Identifier: Apache-2.0
// The leak gate's rules (cli/gate.h; decision leak-gate): keys that
// survive ASLR, LeakSanitizer-style patterns, the suppression and baseline
// files, and which sites fail a run.
#include "cli/gate.h"
#include "cli/gate_report.h"

#include <gtest/gtest.h>

namespace lw::gate {
namespace {

Frame native(const std::string& function, const std::string& module, uint64_t offset = 0x1234) {
  Frame f;
  f.function = function;
  f.module = module;
  f.offset = offset;
  return f;
}

SiteSnapshot site(uint64_t bytes, std::vector<Frame> frames, uint32_t kind = LW_KIND_HEAP) {
  SiteSnapshot s;
  s.kind = kind;
  s.live_bytes = bytes;
  s.live_allocations = 1;
  s.frames = std::move(frames);
  return s;
}

TEST(GateKeys, NamesNotAddressesOrDirectories) {
  SiteSnapshot a = site(10, {native("leak_a", "/build/one/prog", 0x10), native("main", "/build/one/prog", 0x20)});
  SiteSnapshot b = site(10, {native("leak_a", "/ci/two/prog", 0x99), native("main", "/ci/two/prog", 0x77)});
  a.stack_id = 1;
  b.stack_id = 2;
  EXPECT_EQ(site_key(a, 0), site_key(b, 0));
  EXPECT_EQ(site_key(a, 0), "heap\tprog!leak_a\tprog!main");
  EXPECT_EQ(site_key(a, 1), "heap\tprog!leak_a");
  SiteSnapshot unnamed = site(10, {native("", "/lib/libx.so", 0xab)}, LW_KIND_MMAP);
  EXPECT_EQ(site_key(unnamed, 0), "mmap\tlibx.so+0xab");
  Frame py;
  py.language = "python";
  py.function = "hold";
  py.file = "/tmp/x/script.py";
  py.line = 12;
  EXPECT_EQ(frame_key(py), "script.py!hold");
}

TEST(GatePatterns, LeakSanitizerSemantics) {
  EXPECT_TRUE(pattern_matches("leak", "my_leak_fn"));      // substring
  EXPECT_TRUE(pattern_matches("^my_", "my_leak_fn"));
  EXPECT_FALSE(pattern_matches("^leak", "my_leak_fn"));
  EXPECT_TRUE(pattern_matches("fn$", "my_leak_fn"));
  EXPECT_FALSE(pattern_matches("leak$", "my_leak_fn"));
  EXPECT_TRUE(pattern_matches("^my_*_fn$", "my_leak_fn"));
  EXPECT_FALSE(pattern_matches("^my_*_x$", "my_leak_fn"));
  EXPECT_TRUE(pattern_matches("std::vector<*>::push_back", "std::vector<int, std::allocator<int> >::push_back(int&&)"));
  EXPECT_TRUE(pattern_matches("^exact$", "exact"));
  EXPECT_FALSE(pattern_matches("^exact$", "exactly"));
}

TEST(GateSuppressions, FileFormatAndErrors) {
  auto ok = parse_suppressions("# comment\n\nleak:foo  # trailing\n function: ^bar$ \nmodule:libz.so*\n", "s.supp");
  ASSERT_TRUE(ok) << ok.error().message;
  ASSERT_EQ(ok->size(), 3u);
  EXPECT_EQ((*ok)[0].field, Suppression::Field::kAny);
  EXPECT_EQ((*ok)[0].pattern, "foo");
  EXPECT_EQ((*ok)[0].line, 3);
  EXPECT_EQ((*ok)[1].field, Suppression::Field::kFunction);
  EXPECT_EQ((*ok)[1].pattern, "^bar$");
  EXPECT_EQ((*ok)[2].field, Suppression::Field::kModule);
  auto bad = parse_suppressions("leak:a\nrace:b\n", "s.supp");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("s.supp:2:"), std::string::npos) << bad.error().message;
  EXPECT_FALSE(parse_suppressions("just_a_name\n", "s.supp"));
  EXPECT_FALSE(parse_suppressions("leak:\n", "s.supp"));
}

TEST(GateBaseline, RoundTripsAndRejectsOtherFiles) {
  std::string text = format_baseline({"heap\tp!b", "heap\tp!a", "heap\tp!a"});
  auto keys = parse_baseline(text, "b.txt");
  ASSERT_TRUE(keys) << keys.error().message;
  EXPECT_EQ(*keys, (std::set<std::string>{"heap\tp!a", "heap\tp!b"}));
  EXPECT_FALSE(parse_baseline("heap\tp!a\n", "b.txt"));  // no header
  auto bad = parse_baseline(text + "no tab here\n", "b.txt");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("b.txt:4:"), std::string::npos) << bad.error().message;
}

std::vector<SiteSnapshot> two_sites() {
  return {site(5000, {native("leak_big", "/p"), native("main", "/p")}),
          site(100, {native("_IO_file_doallocate", "/lib/libc.so.6"), native("printf", "/lib/libc.so.6")}),
          site(0, {native("freed_all", "/p")})};
}

TEST(GateEvaluate, WithoutRulesEveryUnsuppressedSiteFails) {
  Verdict v = evaluate(two_sites(), default_suppressions(), Rules{});
  EXPECT_TRUE(v.failed);
  ASSERT_EQ(v.sites.size(), 2u);  // the site with nothing live is left out
  EXPECT_EQ(v.sites[0].key, "heap\tp!leak_big\tp!main");
  EXPECT_TRUE(v.sites[0].fails);
  EXPECT_EQ(v.sites[1].suppressed_by, -1);  // a default rule
  EXPECT_EQ(v.total_bytes, 5000u);
  EXPECT_EQ(v.suppressed_bytes, 100u);
  Verdict clean = evaluate({two_sites()[1]}, default_suppressions(), Rules{});
  EXPECT_FALSE(clean.failed);
  Verdict no_defaults = evaluate({two_sites()[1]}, {}, Rules{});
  EXPECT_TRUE(no_defaults.failed);
}

TEST(GateEvaluate, ThresholdsBaselineAndSuppressions) {
  Rules site_limit;
  site_limit.max_site_bytes = 5000;
  EXPECT_FALSE(evaluate(two_sites(), default_suppressions(), site_limit).failed);  // not more than
  site_limit.max_site_bytes = 4999;
  EXPECT_TRUE(evaluate(two_sites(), default_suppressions(), site_limit).sites[0].over_site_limit);

  Rules total;
  total.max_total_bytes = 4000;
  Verdict t = evaluate(two_sites(), default_suppressions(), total);
  EXPECT_TRUE(t.failed);
  EXPECT_TRUE(t.over_total_limit);
  EXPECT_FALSE(t.sites[0].fails);

  Rules base;
  base.baseline = std::set<std::string>{"heap\tp!leak_big\tp!main"};
  EXPECT_FALSE(evaluate(two_sites(), default_suppressions(), base).failed);
  auto more = two_sites();
  more.push_back(site(8, {native("leak_new", "/p"), native("main", "/p")}));
  Verdict nv = evaluate(more, default_suppressions(), base);
  EXPECT_TRUE(nv.failed);
  ASSERT_GE(nv.sites.size(), 2u);
  EXPECT_TRUE(nv.sites[1].new_site);
  EXPECT_EQ(nv.sites[1].key, "heap\tp!leak_new\tp!main");

  auto rules = parse_suppressions("function:^leak_big$\n", "s");
  ASSERT_TRUE(rules);
  Verdict s = evaluate(two_sites(), *rules, Rules{});
  EXPECT_TRUE(s.failed);  // the stdio buffer: no default rules given here
  std::vector<Suppression> all = default_suppressions();
  all.insert(all.end(), rules->begin(), rules->end());
  Verdict s2 = evaluate(two_sites(), all, Rules{});
  EXPECT_FALSE(s2.failed);
  EXPECT_EQ(s2.total_bytes, 0u);
  EXPECT_EQ(baseline_keys(s2).size(), 0u);
}

TEST(GateEvaluate, StacksWithOneKeyMerge) {
  std::vector<SiteSnapshot> sites = {site(10, {native("f", "/p", 0x10)}), site(30, {native("f", "/p", 0x20)})};
  sites[1].frames[0].line = 7;
  Verdict v = evaluate(sites, {}, Rules{});
  ASSERT_EQ(v.sites.size(), 1u);
  EXPECT_EQ(v.sites[0].live_bytes, 40u);
  EXPECT_EQ(v.sites[0].live_allocations, 2u);
  EXPECT_EQ(v.sites[0].frames[0].line, 7);  // the larger stack's frames
}

}  // namespace
}  // namespace lw::gate

namespace lw::gate {
namespace {

TEST(GateExitCode, GateFailureFirstThenTheProgramsOwn) {
  Verdict pass;
  Verdict fail;
  fail.failed = true;
  RunEnd end;
  end.gate_failure_code = 23;
  end.wait_status = 0;  // exited 0
  EXPECT_EQ(run_exit_code(pass, end), 0);
  EXPECT_EQ(run_exit_code(fail, end), 23);
  end.wait_status = 3 << 8;  // exited 3
  EXPECT_EQ(run_exit_code(pass, end), 3);
  EXPECT_EQ(run_exit_code(fail, end), 23);
  end.wait_status = 9;  // killed by SIGKILL
  EXPECT_EQ(run_exit_code(pass, end), 128 + 9);
  end.wait_status.reset();
  EXPECT_EQ(run_exit_code(pass, end), 1);
}

TEST(GateReport, NamesTheFailingSiteWithItsStack) {
  std::vector<SiteSnapshot> sites = {site(4096, {native("leak_big", "/p"), native("main", "/p")})};
  Verdict v = evaluate(sites, {}, Rules{});
  RunEnd end;
  end.program = "./p";
  end.wait_status = 0;
  end.gate_failure_code = 23;
  const std::string text = text_report(v, Rules{}, end, 10);
  EXPECT_NE(text.find("FAIL 4.0 KiB in 1 allocation [heap]"), std::string::npos) << text;
  EXPECT_NE(text.find("    leak_big [p]\n    main [p]\n"), std::string::npos) << text;
  EXPECT_NE(text.find("FAILED: 1 site(s)"), std::string::npos) << text;
  EXPECT_EQ(text.find("not traced"), std::string::npos) << text;
  end.children_untraced = 2;
  EXPECT_NE(text_report(v, Rules{}, end, 10).find("./p forked 2 child process(es), not traced"), std::string::npos);
  const nlohmann::json j = verdict_json(v, Rules{}, end);
  EXPECT_EQ(j.at("children_untraced").get<uint64_t>(), 2u);
  EXPECT_FALSE(j.at("passed").get<bool>());
  EXPECT_EQ(j.at("exit_code").get<int>(), 23);
  EXPECT_EQ(j.at("sites")[0].at("key").get<std::string>(), "heap\tp!leak_big\tp!main");
}

}  // namespace
}  // namespace lw::gate
