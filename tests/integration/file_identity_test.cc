// SPDX-License-Identifier: Apache-2.0
// A copied build-id (issue 32, item 3; decision file-identity): an
// unprivileged user links another user's build-id into a binary of their
// own. The victim's leak must keep the victim's function names and be
// unwound with the victim's own call-frame information, in the daemon that
// saw the attacker first and after a restart that reads the unwind tables
// back from the disk cache. Before the fix the victim's frames were named
// from the attacker's file, its object took the attacker's table (one
// table per build-id), and that table came back from the cache file named
// by the build-id.
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/integration/daemon_harness.h"
#include "tests/integration/harness.h"

namespace lw::itest {
namespace {

using namespace std::chrono_literals;

constexpr uint64_t kVictimKib = 3072;
constexpr uint64_t kAttackerKib = 5120;

std::string twin_config(const std::string &victim, const std::string &attacker, const std::string &cache) {
  return "targets:\n"
         "  - name: twins\n"
         "    match: {comm: \"^(" + file_name_of(victim) + "|" + file_name_of(attacker) + ")$\"}\n"
         "    mode: light\n"
         "unwind:\n"
         "  cache_dir: " + cache + "\n";
}

// The function names of the site holding `bytes`, innermost first; empty
// when no such site.
std::vector<std::string> site_functions(const Json &sites, uint64_t bytes) {
  for (const Json &site : sites.at("sites")) {
    if (site.value("live_bytes", int64_t{0}) != static_cast<int64_t>(bytes)) continue;
    std::vector<std::string> names;
    for (const Json &frame : site.at("frames")) names.push_back(frame.value("function", ""));
    return names;
  }
  return {};
}

// Whether `names` holds `chain` in that order (other frames may sit between).
bool has_chain(const std::vector<std::string> &names, const std::vector<std::string> &chain) {
  size_t next = 0;
  for (const std::string &n : names)
    if (next < chain.size() && n == chain[next]) ++next;
  return next == chain.size();
}

std::string joined(const std::vector<std::string> &names) {
  std::string out;
  for (const std::string &n : names) out += (out.empty() ? "" : " <- ") + (n.empty() ? "?" : n);
  return out;
}

// Starts `path` as `uid`, waits until the daemon attached it and built or
// found every table it maps (a stack taken while its table is pending
// falls back to frame pointers), then makes it leak `kib` KiB; returns the
// functions of its site.
std::vector<std::string> leak_and_read(DaemonProcess &daemon, Process &p, uint64_t kib) {
  daemon.wait_for_process(p.pid(), 10s);
  daemon.wait_for_status([](const Json &s) { return s.at("unwind").at("objects").at("pending") == 0; }, 10s,
                         "unwind tables built");
  p.write_line("go");
  std::optional<std::string> line = p.read_line(10s);
  if (!line || *line != "leaked") return {};
  const double after = unix_now() + 1;
  std::vector<std::string> names;
  // The site shows once a snapshot after the leak has it with its symbols.
  wait_until(15s, [&] {
    names = site_functions(daemon.sites_at_or_after(p.pid(), after, 10s), kib << 10);
    return !names.empty();
  }, 200ms);
  return names;
}

bool any_attacker_name(const std::vector<std::string> &names) {
  for (const std::string &n : names)
    if (n.rfind("attacker_", 0) == 0) return true;
  return false;
}

TEST(HostileTenant, ACopiedBuildIdDoesNotNameOrUnwindAnotherUsersLeak) {
  TempDir bin, cache;
  ASSERT_EQ(chmod(bin.path().c_str(), 0755), 0);
  const std::string victim = private_target_copy(bin.path(), "twin_victim");
  const std::string attacker = private_target_copy(bin.path(), "twin_attacker");
  const std::string config = twin_config(victim, attacker, cache.path());
  const std::vector<std::string> victim_chain = {"victim_leak_site", "victim_middle", "main"};
  {
    DaemonProcess daemon({.config_body = config, .args = {}});
    daemon.wait_notify("READY=1", kReadyTimeout);
    // The attacker first: its file is the first with the build-id, so its
    // symbols and its table are the ones a build-id key would share.
    Process evil({attacker, std::to_string(kAttackerKib)}, {.as_nobody = true});
    const std::vector<std::string> evil_names = leak_and_read(daemon, evil, kAttackerKib);
    ASSERT_TRUE(has_chain(evil_names, {"attacker_leak_site", "attacker_middle", "attacker_pad_1", "main"}))
        << joined(evil_names) << daemon.diagnostics();
    const Json before = daemon.get_json("/api/v1/status").at("unwind");

    Process mine({victim, std::to_string(kVictimKib)}, {.as_uid = 65533});
    const std::vector<std::string> names = leak_and_read(daemon, mine, kVictimKib);
    const Json after = daemon.get_json("/api/v1/status").at("unwind");
    std::printf("[ figures  ] copied build-id, attacker (nobody) first: victim's site %s; unwind tables %d -> "
                "%d\n",
                joined(names).c_str(), before.at("tables").get<int>(), after.at("tables").get<int>());
    EXPECT_TRUE(has_chain(names, victim_chain)) << joined(names) << daemon.diagnostics();
    EXPECT_FALSE(any_attacker_name(names)) << joined(names);
    // Its own table: one more loaded for its object (libc and the loader's
    // are the attacker's too, and shared: the same files).
    EXPECT_EQ(after.at("tables").get<int>(), before.at("tables").get<int>() + 1) << after.dump();
  }
  {
    // A restart: the victim alone, its tables read back from the cache
    // directory, where the attacker's table was written first.
    DaemonProcess daemon({.config_body = config, .args = {}});
    daemon.wait_notify("READY=1", kReadyTimeout);
    Process mine({victim, std::to_string(kVictimKib)}, {.as_uid = 65533});
    const std::vector<std::string> names = leak_and_read(daemon, mine, kVictimKib);
    const Json unwind = daemon.get_json("/api/v1/status").at("unwind");
    std::printf("[ figures  ] after a restart: victim's site %s; %d tables from the disk cache, %d built, %d "
                "cache files refused as another file's\n",
                joined(names).c_str(), unwind.at("disk_cache_hits").get<int>(), unwind.at("builds").get<int>(),
                unwind.value("disk_cache_mismatches", -1));
    EXPECT_TRUE(has_chain(names, victim_chain)) << joined(names) << daemon.diagnostics();
    EXPECT_FALSE(any_attacker_name(names)) << joined(names);
    EXPECT_GE(unwind.at("disk_cache_hits").get<int>(), 1) << unwind.dump();
    EXPECT_EQ(unwind.at("builds").get<int>(), 0) << "the victim's table was not in the cache: " << unwind.dump();
  }
}

}  // namespace
}  // namespace lw::itest
