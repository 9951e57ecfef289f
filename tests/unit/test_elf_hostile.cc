// SPDX-License-Identifier: Apache-2.0
// Crafted-ELF corpus (issue #8): files built here from a copy of libc with
// one lie each in their headers. Each must be refused by ElfFile (and so by
// the symbolizer, which never hands it to libdw) in under a second, with
// less than 64 MiB of extra RSS, and counted under the expected reason.
// A second test proves the layout checks refuse nothing real: every ELF
// object of this machine's /usr/bin and /usr/lib still opens.
#include <dirent.h>
#include <elf.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include "core/symbols/elf_file.h"
#include "core/symbols/symbolizer.h"

namespace lw {
namespace {

constexpr const char* kLibc = "/lib/x86_64-linux-gnu/libc.so.6";

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

// Bytes of the named /proc/self/status field ("VmRSS", "VmHWM").
uint64_t status_bytes(const char* field) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind(field, 0) == 0 && line[strlen(field)] == ':') {
      return std::stoull(line.substr(strlen(field) + 1)) * 1024;
    }
  }
  return 0;
}

// Resets VmHWM to the current RSS (clear_refs "5", Linux >= 4.0), so the
// peak measured afterwards is the peak of what runs next.
bool reset_peak_rss() {
  std::ofstream f("/proc/self/clear_refs");
  f << "5";
  f.flush();
  return static_cast<bool>(f);
}

struct Libc {
  std::vector<uint8_t> bytes;
  Elf64_Ehdr eh;
  Elf64_Shdr* sh(size_t i) {
    return reinterpret_cast<Elf64_Shdr*>(bytes.data() + eh.e_shoff + i * sizeof(Elf64_Shdr));
  }
  size_t find(uint32_t type) {
    for (size_t i = 1; i < eh.e_shnum; ++i) {
      if (sh(i)->sh_type == type) return i;
    }
    return 0;
  }
  void store_ehdr() { memcpy(bytes.data(), &eh, sizeof(eh)); }
};

struct Crafted {
  std::string name;
  ElfReject reason;
  // Edits the copy; may set `sparse_size` to grow the file with a hole.
  std::function<void(Libc&, uint64_t& sparse_size)> edit;
};

TEST(ElfHostile, CraftedCorpusRefusedFastBoundedAndCountedByReason) {
  Libc base;
  base.bytes = read_file(kLibc);
  ASSERT_GT(base.bytes.size(), sizeof(Elf64_Ehdr));
  memcpy(&base.eh, base.bytes.data(), sizeof(base.eh));
  ASSERT_NE(base.find(SHT_DYNSYM), 0u);

  const uint64_t gib = 1ull << 30;
  const std::vector<Crafted> corpus = {
      {"huge_strtab", ElfReject::kHugeStringTable,
       [&](Libc& l, uint64_t& sparse) {
         // .dynstr claims 1 GiB that the file (sparse) really has.
         Elf64_Shdr* s = l.sh(l.sh(l.find(SHT_DYNSYM))->sh_link);
         sparse = 2 * gib;
         s->sh_offset = gib;
         s->sh_size = gib - 4096;
       }},
      {"symbol_count_in_the_billions", ElfReject::kTruncatedSection,
       [&](Libc& l, uint64_t&) {
         l.sh(l.find(SHT_DYNSYM))->sh_size = 3'000'000'000ull * sizeof(Elf64_Sym);
       }},
      {"symbol_count_inside_the_file", ElfReject::kTooManySymbols,
       [&](Libc& l, uint64_t& sparse) {
         // 40 M symbols the (sparse) file really contains.
         Elf64_Shdr* s = l.sh(l.find(SHT_DYNSYM));
         sparse = 2 * gib;
         s->sh_offset = gib;
         s->sh_size = 40'000'000ull * sizeof(Elf64_Sym);
       }},
      {"truncated_section", ElfReject::kTruncatedSection,
       [&](Libc& l, uint64_t&) {
         Elf64_Shdr* s = l.sh(l.find(SHT_DYNSYM));
         s->sh_offset = l.bytes.size() - 16;
       }},
      {"overlapping_sections", ElfReject::kOverlappingSections,
       [&](Libc& l, uint64_t&) {
         Elf64_Shdr* sym = l.sh(l.find(SHT_DYNSYM));
         Elf64_Shdr* str = l.sh(sym->sh_link);
         str->sh_offset = sym->sh_offset + 24;
       }},
      {"bad_e_shoff", ElfReject::kBadSectionTable,
       [&](Libc& l, uint64_t&) {
         l.eh.e_shoff = l.bytes.size() + 4096;
         l.store_ehdr();
       }},
      {"e_shoff_wraps", ElfReject::kBadSectionTable,
       [&](Libc& l, uint64_t&) {
         l.eh.e_shoff = UINT64_MAX - 32;
         l.store_ehdr();
       }},
      {"section_count_in_extended_numbering", ElfReject::kBadSectionTable,
       [&](Libc& l, uint64_t&) {
         l.eh.e_shnum = 0;  // the real count is then sh_size of section 0
         l.store_ehdr();
         l.sh(0)->sh_size = 1ull << 40;
       }},
      {"symtab_entry_size", ElfReject::kBadSymbolTable,
       [&](Libc& l, uint64_t&) { l.sh(l.find(SHT_DYNSYM))->sh_entsize = 1; }},
      {"symtab_link_not_a_strtab", ElfReject::kBadSymbolTable,
       [&](Libc& l, uint64_t&) {
         l.sh(l.find(SHT_DYNSYM))->sh_link = static_cast<uint32_t>(l.find(SHT_DYNSYM));
       }},
      {"phdrs_outside_the_file", ElfReject::kBadProgramHeaders,
       [&](Libc& l, uint64_t&) {
         l.eh.e_phoff = l.bytes.size() - 8;
         l.store_ehdr();
       }},
      {"shstrndx_out_of_range", ElfReject::kBadHeader,
       [&](Libc& l, uint64_t&) {
         l.eh.e_shstrndx = static_cast<uint16_t>(l.eh.e_shnum + 5);
         l.store_ehdr();
       }},
  };

  const std::string dir = testing::TempDir();
  for (const Crafted& c : corpus) {
    SCOPED_TRACE(c.name);
    Libc l = base;
    uint64_t sparse = 0;
    c.edit(l, sparse);
    const std::string path = dir + "lw_crafted_" + std::to_string(getpid()) + "_" + c.name;
    {
      std::ofstream f(path, std::ios::binary | std::ios::trunc);
      f.write(reinterpret_cast<const char*>(l.bytes.data()),
              static_cast<std::streamsize>(l.bytes.size()));
    }
    if (sparse > l.bytes.size()) {
      ASSERT_EQ(truncate(path.c_str(), static_cast<off_t>(sparse)), 0);
    }

    const std::vector<uint64_t> before = elf_rejection_counts();
    ASSERT_TRUE(reset_peak_rss());
    const uint64_t rss0 = status_bytes("VmRSS");
    const auto t0 = std::chrono::steady_clock::now();

    auto elf = ElfFile::open_path(path);
    Symbolizer symbolizer;  // never hands the file to libdw
    Frame f = symbolizer.symbolize({"/crafted", path, 0, ""}, 0x1000);

    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const uint64_t peak = status_bytes("VmHWM");
    const std::vector<uint64_t> after = elf_rejection_counts();
    unlink(path.c_str());

    ASSERT_FALSE(elf.ok());
    EXPECT_NE(elf.error().message.find(path), std::string::npos) << elf.error().message;
    EXPECT_EQ(symbolizer.errors(), 1u);
    EXPECT_TRUE(f.function.empty());
    EXPECT_LT(seconds, 1.0);
    EXPECT_LT(peak - std::min(peak, rss0), 64ull << 20);
    // Opened twice (ElfFile, symbolizer): two refusals, both for this reason.
    for (size_t r = 0; r < before.size(); ++r) {
      EXPECT_EQ(after[r] - before[r], r == static_cast<size_t>(c.reason) ? 2u : 0u)
          << "reason " << elf_reject_name(static_cast<ElfReject>(r)) << ": "
          << elf.error().message;
    }
    std::printf("  %-36s refused in %6.2f ms, peak RSS +%5.1f MiB: %s\n", c.name.c_str(),
                seconds * 1e3, static_cast<double>(peak - std::min(peak, rss0)) / (1 << 20),
                elf.error().message.substr(path.size() + 2).c_str());
  }
}

// Calls fn(path) for each regular file in `dir` (not recursive) that starts
// with the ELF magic.
void for_each_elf(const std::string& dir, const std::function<void(const std::string&)>& fn) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return;
  while (dirent* e = readdir(d)) {
    const std::string path = dir + "/" + e->d_name;
    struct stat st;
    if (lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < 64) continue;
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) continue;
    char magic[4] = {};
    const bool elf = pread(fd, magic, 4, 0) == 4 && memcmp(magic, ELFMAG, SELFMAG) == 0;
    close(fd);
    if (elf) fn(path);
  }
  closedir(d);
}

TEST(ElfHostile, EveryRealObjectOnThisMachinePassesTheLayoutChecks) {
  size_t checked = 0;
  std::vector<std::string> refused;
  for (const char* dir : {"/usr/bin", "/usr/sbin", "/usr/lib/x86_64-linux-gnu",
                          "/usr/local/cuda/lib64"}) {
    for_each_elf(dir, [&](const std::string& path) {
      const std::vector<uint64_t> before = elf_rejection_counts();
      auto elf = ElfFile::open_path(path);
      ++checked;
      if (elf.ok()) return;
      const std::vector<uint64_t> after = elf_rejection_counts();
      // 32-bit or foreign objects are refused as unsupported, rightly.
      if (after[static_cast<size_t>(ElfReject::kUnsupported)] !=
          before[static_cast<size_t>(ElfReject::kUnsupported)]) {
        return;
      }
      refused.push_back(elf.error().message);
    });
  }
  std::printf("  %zu ELF objects checked\n", checked);
  EXPECT_GT(checked, 100u);
  EXPECT_TRUE(refused.empty()) << refused.size() << " real objects refused, first: "
                               << refused.front();
}

}  // namespace
}  // namespace lw
