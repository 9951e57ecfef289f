// SPDX-License-Identifier: Apache-2.0
// Compressed-section bombs (issue 32, item 1): an object whose .debug_info
// is SHF_COMPRESSED and declares 1 GiB (zlib of zeros, 1 MB in the file)
// took the daemon from 32 to 1,074 MiB through libdw's inflate. The
// section headers are now checked before libdwfl sees a file
// (ElfDebugLinks::inflated_*, SymbolizerLimits::max_inflated_bytes). The
// bombs are copies of tests/targets/symbols_leaker (built with DWARF and a
// .symtab) whose .debug_info is replaced by a compressed one appended at
// the end of the file.
#include <elf.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "core/symbols/elf_file.h"
#include "core/symbols/symbolizer.h"

namespace lw {
namespace {

namespace fs = std::filesystem;

const std::string kFull = std::string(LW_TARGETS_DIR) + "/symbols_leaker";

// zlib of `size` zero bytes, streamed (1 GiB gives 1.0 MB, in about 3 s).
std::vector<uint8_t> zlib_zeros(uint64_t size) {
  z_stream zs{};
  EXPECT_EQ(deflateInit(&zs, Z_DEFAULT_COMPRESSION), Z_OK);
  std::vector<uint8_t> in(1u << 20, 0), out;
  std::vector<uint8_t> buf(1u << 20);
  uint64_t left = size;
  int flush = Z_NO_FLUSH;
  do {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(left, in.size()));
    left -= n;
    flush = left == 0 ? Z_FINISH : Z_NO_FLUSH;
    zs.next_in = in.data();
    zs.avail_in = static_cast<uInt>(n);
    do {
      zs.next_out = buf.data();
      zs.avail_out = static_cast<uInt>(buf.size());
      deflate(&zs, flush);
      out.insert(out.end(), buf.begin(), buf.end() - zs.avail_out);
    } while (zs.avail_out == 0);
  } while (flush != Z_FINISH);
  deflateEnd(&zs);
  return out;
}

// A copy of symbols_leaker at `path` whose `section` is SHF_COMPRESSED,
// declaring `declared` bytes, with `payload` (zlib) as its data.
void write_bomb(const std::string& path, const char* section, uint64_t declared,
                const std::vector<uint8_t>& payload) {
  std::ifstream in(kFull, std::ios::binary);
  std::vector<char> file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(file.size(), sizeof(Elf64_Ehdr));
  Elf64_Ehdr eh;
  memcpy(&eh, file.data(), sizeof(eh));
  auto shdr_at = [&](size_t i) { return file.data() + eh.e_shoff + i * sizeof(Elf64_Shdr); };
  Elf64_Shdr strtab;
  memcpy(&strtab, shdr_at(eh.e_shstrndx), sizeof(strtab));
  while (file.size() % 8 != 0) file.push_back(0);
  for (size_t i = 0; i < eh.e_shnum; ++i) {
    Elf64_Shdr sh;
    memcpy(&sh, shdr_at(i), sizeof(sh));
    if (strcmp(file.data() + strtab.sh_offset + sh.sh_name, section) != 0) continue;
    Elf64_Chdr ch{};
    ch.ch_type = ELFCOMPRESS_ZLIB;
    ch.ch_size = declared;
    ch.ch_addralign = 1;
    sh.sh_offset = file.size();
    sh.sh_size = sizeof(ch) + payload.size();
    sh.sh_flags |= SHF_COMPRESSED;
    sh.sh_addralign = 8;
    memcpy(shdr_at(i), &sh, sizeof(sh));
    const auto* c = reinterpret_cast<const char*>(&ch);
    file.insert(file.end(), c, c + sizeof(ch));
    file.insert(file.end(), payload.begin(), payload.end());
    std::ofstream(path, std::ios::binary).write(file.data(), static_cast<std::streamsize>(file.size()));
    return;
  }
  FAIL() << "no " << section << " in " << kFull;
}

ModuleRef ref_of(const std::string& path) {
  ModuleRef r;
  r.path = path;
  r.open_path = path;
  return r;
}

// An address inside leak_named (a symbol of the .symtab: not exported).
uint64_t offset_in_leak_named() {
  auto elf = ElfFile::open_path(kFull);
  EXPECT_TRUE(elf.ok());
  if (!elf.ok()) return 0;
  std::optional<ElfSymbol> sym = (*elf)->find_function("leak_named");
  EXPECT_TRUE(sym.has_value());
  return sym ? (*elf)->vaddr_to_offset(sym->vaddr + 4).value_or(0) : 0;
}

uint64_t status_kib(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(field, 0) == 0) return std::stoull(line.substr(strlen(field)));
  return 0;
}

std::string temp_path(const std::string& name) {
  return testing::TempDir() + "lw_bomb_" + std::to_string(getpid()) + "_" + name;
}

TEST(InflateBomb, DeclaredSizesAreReadFromTheSectionHeaders) {
  const std::string path = temp_path("declared");
  write_bomb(path, ".debug_info", 1ull << 30, zlib_zeros(1 << 16));
  auto elf = ElfFile::open_path(path);
  ASSERT_TRUE(elf.ok()) << elf.error().message;
  EXPECT_EQ((*elf)->debug_links().inflated_dwarf_bytes, 1ull << 30);
  EXPECT_EQ((*elf)->debug_links().inflated_symbol_bytes, 0u);
  auto plain = ElfFile::open_path(kFull);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ((*plain)->debug_links().inflated_dwarf_bytes, 0u);
  fs::remove(path);
}

// The bomb is refused before libdw inflates it: names from the .symtab,
// no lines, the refusal counted, and the daemon's memory (here a child's
// peak RSS) does not grow by the declared gigabyte (it did: +1,024 MiB).
TEST(InflateBomb, AGigabyteDeclaredIsNotInflated) {
  const std::string path = temp_path("gib");
  write_bomb(path, ".debug_info", 1ull << 30, zlib_zeros(1ull << 30));
  const uint64_t offset = offset_in_leak_named();
  int pipefd[2];
  ASSERT_EQ(pipe(pipefd), 0);
  const pid_t child = fork();
  if (child == 0) {
    close(pipefd[0]);
    const uint64_t before = status_kib("VmRSS:");
    Symbolizer s;
    const Frame f = s.symbolize(ref_of(path), offset);
    const SymbolizerStats st = s.stats();
    const uint64_t grown = status_kib("VmHWM:") - before;
    const std::string report = f.function + " " + std::to_string(f.line) + " " +
                               std::to_string(st.inflated_refused) + " " + std::to_string(grown);
    (void)!write(pipefd[1], report.data(), report.size());
    _exit(0);
  }
  close(pipefd[1]);
  char buf[256] = {};
  ssize_t n = read(pipefd[0], buf, sizeof(buf) - 1);
  close(pipefd[0]);
  int status = 0;
  waitpid(child, &status, 0);
  fs::remove(path);
  ASSERT_GT(n, 0);
  std::string function;
  int line = -1;
  uint64_t refused = 0, grown_kib = 0;
  std::istringstream(std::string(buf, static_cast<size_t>(n))) >> function >> line >> refused >> grown_kib;
  std::printf("[ figures  ] 1 GiB declared in %s's .debug_info: peak RSS +%llu KiB while symbolizing\n",
              "symbols_leaker", static_cast<unsigned long long>(grown_kib));
  EXPECT_EQ(function, "leak_named");
  EXPECT_EQ(line, 0);
  EXPECT_EQ(refused, 1u);
  EXPECT_LT(grown_kib, 64u << 10) << "peak RSS grew by " << grown_kib << " KiB";
}

// Modules together stay within the bound: the least recently used closes.
TEST(InflateBomb, OpenModulesTogetherStayWithinTheBound) {
  const std::string a = temp_path("a"), b = temp_path("b");
  const std::vector<uint8_t> small = zlib_zeros(1 << 16);  // declares more than it holds
  write_bomb(a, ".debug_info", 100u << 20, small);
  write_bomb(b, ".debug_info", 100u << 20, small);
  const uint64_t offset = offset_in_leak_named();
  Symbolizer s;  // 128 MiB
  EXPECT_EQ(s.symbolize(ref_of(a), offset).function, "leak_named");
  EXPECT_EQ(s.stats().inflated_bytes, 100u << 20);
  EXPECT_EQ(s.symbolize(ref_of(b), offset).function, "leak_named");
  SymbolizerStats st = s.stats();
  EXPECT_EQ(st.inflated_refused, 0u);
  EXPECT_EQ(st.inflated_evictions, 1u);
  EXPECT_EQ(st.inflated_bytes, 100u << 20);
  // Under a lower bound each alone is over it: names only, nothing held.
  Symbolizer low(SymbolizerLimits{.max_inflated_bytes = 64u << 20});
  EXPECT_EQ(low.symbolize(ref_of(a), offset).function, "leak_named");
  EXPECT_EQ(low.stats().inflated_refused, 1u);
  EXPECT_EQ(low.stats().inflated_bytes, 0u);
  EXPECT_FALSE(low.module_info(ref_of(a)).wants_debug_file);  // no debuginfod fetch for it either
  fs::remove(a);
  fs::remove(b);
}

}  // namespace
}  // namespace lw
