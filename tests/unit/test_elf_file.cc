// SPDX-License-Identifier: Apache-2.0
#include "core/symbols/elf_file.h"

#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/proc/proc_maps.h"

// In .symtab only (the test binary is not linked with -rdynamic).
extern "C" __attribute__((noinline)) int lw_elf_test_symtab_function(int x) {
  asm volatile("" : "+r"(x));
  return x + 1;
}

namespace lw {
namespace {

constexpr const char* kLibc = "/lib/x86_64-linux-gnu/libc.so.6";

std::string run_command(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  pclose(p);
  return out;
}

// `nm -D` defined function symbols: "name@@VER" / "name@VER" / "name" -> value.
std::map<std::string, uint64_t> nm_dynamic_functions(const std::string& path) {
  std::map<std::string, uint64_t> out;
  std::istringstream in(run_command("nm -D --defined-only " + path + " 2>/dev/null"));
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string value, type, name;
    if (!(fields >> value >> type >> name)) continue;
    if (type != "T" && type != "t" && type != "i" && type != "W") continue;
    out[name] = std::stoull(value, nullptr, 16);
  }
  return out;
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

std::string temp_path(const std::string& name) {
  return testing::TempDir() + "lw_elf_test_" + std::to_string(getpid()) + "_" + name;
}

void write_file(const std::string& path, const uint8_t* data, size_t n) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(n));
}

// File offset of a runtime address in this process, via /proc/self/maps.
uint64_t runtime_file_offset(const void* addr) {
  auto maps = read_proc_maps(getpid());
  if (!maps.ok()) return UINT64_MAX;
  const MapEntry* m = find_mapping(*maps, reinterpret_cast<uint64_t>(addr));
  return m ? reinterpret_cast<uint64_t>(addr) - m->start + m->offset : UINT64_MAX;
}

void* libc_symbol(const char* name, const char* version = nullptr) {
  void* h = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
  if (h == nullptr) return nullptr;
  void* p = version ? dlvsym(h, name, version) : dlsym(h, name);
  dlclose(h);
  return p;
}

std::shared_ptr<const ElfFile> open_libc() {
  auto elf = ElfFile::open_path(kLibc);
  EXPECT_TRUE(elf.ok()) << elf.error().message;
  return elf.ok() ? elf.value() : nullptr;
}

TEST(ElfFile, OpensLibc) {
  auto elf = open_libc();
  ASSERT_TRUE(elf);
  EXPECT_EQ(elf->path(), kLibc);
  EXPECT_FALSE(elf->is_exec());
  ASSERT_FALSE(elf->segments().empty());
  bool any_exec = false;
  for (const ElfSegment& s : elf->segments()) {
    any_exec |= s.executable;
    EXPECT_LE(s.filesz, s.memsz);
    EXPECT_EQ(elf->offset_to_vaddr(s.offset), s.vaddr);
    EXPECT_EQ(elf->vaddr_to_offset(s.vaddr), s.offset);
  }
  EXPECT_TRUE(any_exec);
  EXPECT_FALSE(elf->find_function("no_such_function_in_libc_xyz"));
}

TEST(ElfFile, BuildIdMatchesReadelf) {
  std::string out = run_command(std::string("readelf -n ") + kLibc + " 2>/dev/null");
  size_t at = out.find("Build ID: ");
  if (at == std::string::npos) GTEST_SKIP() << "readelf not available";
  std::istringstream in(out.substr(at + 10));
  std::string expected;
  in >> expected;
  auto elf = open_libc();
  ASSERT_TRUE(elf);
  EXPECT_EQ(elf->build_id(), expected);
}

TEST(ElfFile, MallocMatchesNmAndRuntime) {
  auto elf = open_libc();
  ASSERT_TRUE(elf);
  auto sym = elf->find_function("malloc");
  ASSERT_TRUE(sym);
  EXPECT_EQ(sym->name, "malloc");
  EXPECT_GT(sym->size, 0u);

  auto nm = nm_dynamic_functions(kLibc);
  if (!nm.empty()) {
    auto it = nm.lower_bound("malloc@@");
    ASSERT_TRUE(it != nm.end() && it->first.starts_with("malloc@@"));
    EXPECT_EQ(sym->vaddr, it->second);
  }

  const void* runtime = libc_symbol("malloc");
  ASSERT_NE(runtime, nullptr);
  EXPECT_EQ(elf->vaddr_to_offset(sym->vaddr), runtime_file_offset(runtime));
  // The text is mapped unmodified from the file.
  std::vector<uint8_t> code = elf->read_at_vaddr(sym->vaddr, 32);
  ASSERT_EQ(code.size(), 32u);
  EXPECT_EQ(memcmp(code.data(), runtime, code.size()), 0);
}

// The default version (name@@VER) must win over a hidden one (name@VER).
TEST(ElfFile, PrefersDefaultSymbolVersion) {
  auto elf = open_libc();
  ASSERT_TRUE(elf);
  auto nm = nm_dynamic_functions(kLibc);
  if (nm.empty()) GTEST_SKIP() << "nm not available";
  for (std::string name : {"realpath", "memcpy"}) {
    SCOPED_TRACE(name);
    uint64_t default_value = 0;
    std::vector<std::pair<std::string, uint64_t>> hidden;  // version, value
    for (const auto& [versioned, value] : nm) {
      if (versioned.starts_with(name + "@@")) {
        default_value = value;
      } else if (versioned.starts_with(name + "@")) {
        hidden.emplace_back(versioned.substr(name.size() + 1), value);
      }
    }
    ASSERT_NE(default_value, 0u);
    ASSERT_FALSE(hidden.empty());
    auto sym = elf->find_function(name);
    ASSERT_TRUE(sym);
    EXPECT_EQ(sym->vaddr, default_value);
    for (const auto& h : hidden) EXPECT_NE(sym->vaddr, h.second) << h.first;
  }

  // Cross-check realpath with the dynamic linker (memcpy is an IFUNC, so its
  // runtime address is the selected implementation, not the symbol).
  auto realpath_sym = elf->find_function("realpath");
  ASSERT_TRUE(realpath_sym);
  EXPECT_EQ(elf->vaddr_to_offset(realpath_sym->vaddr),
            runtime_file_offset(libc_symbol("realpath")));
}

// A function that exists only in hidden versions is still found.
TEST(ElfFile, FallsBackToHiddenVersion) {
  auto nm = nm_dynamic_functions(kLibc);
  if (nm.empty()) GTEST_SKIP() << "nm not available";
  std::map<std::string, std::vector<uint64_t>> hidden_only;
  std::map<std::string, bool> has_default;
  for (const auto& [versioned, value] : nm) {
    size_t at = versioned.find('@');
    std::string base = versioned.substr(0, at);
    if (at == std::string::npos || versioned.compare(at, 2, "@@") == 0) {
      has_default[base] = true;
    } else {
      hidden_only[base].push_back(value);
    }
  }
  std::erase_if(hidden_only, [&](const auto& kv) { return has_default.count(kv.first) > 0; });
  if (hidden_only.empty()) GTEST_SKIP() << "libc has no hidden-only function";
  auto elf = open_libc();
  ASSERT_TRUE(elf);
  for (const auto& [name, values] : hidden_only) {
    auto sym = elf->find_function(name);
    ASSERT_TRUE(sym) << name;
    EXPECT_NE(std::find(values.begin(), values.end(), sym->vaddr), values.end()) << name;
  }
}

TEST(ElfFile, FindsSymtabFunctionOfTestBinary) {
  auto elf = ElfFile::open_path("/proc/self/exe");
  ASSERT_TRUE(elf.ok()) << elf.error().message;
  EXPECT_FALSE(elf.value()->build_id().empty());
  auto sym = elf.value()->find_function("lw_elf_test_symtab_function");
  ASSERT_TRUE(sym);
  EXPECT_EQ(elf.value()->vaddr_to_offset(sym->vaddr),
            runtime_file_offset(reinterpret_cast<const void*>(&lw_elf_test_symtab_function)));
}

TEST(ElfFile, OpenFdKeepsCallerFd) {
  int fd = open(kLibc, O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  {
    auto elf = ElfFile::open_fd(fd, "libc");
    ASSERT_TRUE(elf.ok()) << elf.error().message;
    EXPECT_EQ(elf.value()->path(), "libc");
  }
  EXPECT_EQ(fcntl(fd, F_GETFD), FD_CLOEXEC);
  close(fd);
}

TEST(ElfFile, RejectsNonElfInputs) {
  auto missing = ElfFile::open_path("/nonexistent/lw/libfoo.so");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, ENOENT);

  EXPECT_FALSE(ElfFile::open_path("/").ok());  // a directory

  const std::string empty = temp_path("empty");
  write_file(empty, nullptr, 0);
  auto e = ElfFile::open_path(empty);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.error().message.find("not an ELF file"), std::string::npos) << e.error().message;

  const std::string text = temp_path("text");
  const std::string body = "#!/bin/sh\necho not an elf\n";
  write_file(text, reinterpret_cast<const uint8_t*>(body.data()), body.size());
  auto t = ElfFile::open_path(text);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.error().message.find("not an ELF file"), std::string::npos) << t.error().message;

  std::vector<uint8_t> libc = read_file(kLibc);
  ASSERT_GT(libc.size(), sizeof(Elf64_Ehdr));

  std::vector<uint8_t> elf32 = libc;
  elf32[EI_CLASS] = ELFCLASS32;
  const std::string p32 = temp_path("elf32");
  write_file(p32, elf32.data(), elf32.size());
  auto r32 = ElfFile::open_path(p32);
  ASSERT_FALSE(r32.ok());
  EXPECT_NE(r32.error().message.find("64-bit"), std::string::npos) << r32.error().message;

  std::vector<uint8_t> arm = libc;
  const uint16_t aarch64 = EM_AARCH64;
  memcpy(arm.data() + offsetof(Elf64_Ehdr, e_machine), &aarch64, sizeof(aarch64));
  const std::string parm = temp_path("aarch64");
  write_file(parm, arm.data(), arm.size());
  auto rarm = ElfFile::open_path(parm);
  ASSERT_FALSE(rarm.ok());
  EXPECT_NE(rarm.error().message.find("x86_64"), std::string::npos) << rarm.error().message;

  for (const auto& p : {empty, text, p32, parm}) unlink(p.c_str());
}

// Whatever opened from a hostile file must be safe to use.
void exercise(const ElfFile& elf) {
  for (const char* name : {"malloc", "free", "memcpy", "realpath", ""}) {
    if (auto sym = elf.find_function(name)) {
      (void)elf.read_at_vaddr(sym->vaddr, 64);
      (void)elf.vaddr_to_offset(sym->vaddr);
    }
  }
  for (const ElfSegment& s : elf.segments()) {
    std::vector<uint8_t> bytes = elf.read_at_vaddr(s.vaddr, 4096);
    EXPECT_LE(bytes.size(), s.filesz);
    (void)elf.offset_to_vaddr(s.offset);
  }
  EXPECT_TRUE(elf.read_at_vaddr(UINT64_MAX - 1, 100).size() <= 1);
  EXPECT_EQ(elf.build_id().size() % 2, 0u);
}

TEST(ElfFile, TruncatedCopiesNeverCrash) {
  std::vector<uint8_t> libc = read_file(kLibc);
  ASSERT_GT(libc.size(), 4096u);
  Elf64_Ehdr ehdr;
  memcpy(&ehdr, libc.data(), sizeof(ehdr));

  std::vector<size_t> lengths;
  for (size_t n = 0; n <= 256; ++n) lengths.push_back(n);
  for (size_t i = 1; i < 64; ++i) lengths.push_back(libc.size() * i / 64);
  for (size_t d = 0; d < 128; d += 7) {
    if (ehdr.e_shoff > d) lengths.push_back(ehdr.e_shoff - d);
    lengths.push_back(ehdr.e_shoff + d);
    lengths.push_back(libc.size() - 1 - d);
  }
  const std::string path = temp_path("truncated");
  size_t opened = 0;
  for (size_t n : lengths) {
    if (n > libc.size()) continue;
    SCOPED_TRACE(n);
    write_file(path, libc.data(), n);
    auto elf = ElfFile::open_path(path);
    if (elf.ok()) {
      ++opened;
      exercise(*elf.value());
    } else {
      EXPECT_FALSE(elf.error().message.empty());
    }
  }
  unlink(path.c_str());
  // libc's section headers are at its end: a cut copy is refused as a whole
  // (section table or a section outside the file), never half used.
  EXPECT_EQ(opened, 0u);
  write_file(path, libc.data(), libc.size());
  EXPECT_TRUE(ElfFile::open_path(path).ok());
  unlink(path.c_str());
}

TEST(ElfFile, CorruptedCopiesNeverCrash) {
  const std::vector<uint8_t> libc = read_file(kLibc);
  ASSERT_GT(libc.size(), 4096u);
  Elf64_Ehdr ehdr;
  memcpy(&ehdr, libc.data(), sizeof(ehdr));
  ASSERT_LE(ehdr.e_shoff + ehdr.e_shnum * sizeof(Elf64_Shdr), libc.size());

  // Regions worth corrupting: ELF and program headers, the section header
  // table, and the contents of the sections this code parses.
  std::vector<std::pair<uint64_t, uint64_t>> regions = {
      {0, 4096}, {ehdr.e_shoff, ehdr.e_shnum * sizeof(Elf64_Shdr)}};
  for (size_t i = 0; i < ehdr.e_shnum; ++i) {
    Elf64_Shdr sh;
    memcpy(&sh, libc.data() + ehdr.e_shoff + i * sizeof(sh), sizeof(sh));
    if (sh.sh_type == SHT_DYNSYM || sh.sh_type == SHT_GNU_versym || sh.sh_type == SHT_NOTE ||
        sh.sh_type == SHT_STRTAB) {
      regions.emplace_back(sh.sh_offset, std::min<uint64_t>(sh.sh_size, 1 << 16));
    }
  }

  const std::string path = temp_path("corrupt");
  write_file(path, libc.data(), libc.size());
  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  std::mt19937 rng(20240601);
  for (int iter = 0; iter < 400; ++iter) {
    SCOPED_TRACE(iter);
    const auto& [base, len] = regions[rng() % regions.size()];
    const int nbytes = 1 + static_cast<int>(rng() % 16);
    std::vector<uint64_t> offsets;
    for (int k = 0; k < nbytes; ++k) {
      uint64_t off = base + rng() % len;
      uint8_t b = static_cast<uint8_t>(rng());
      ASSERT_EQ(pwrite(fd, &b, 1, static_cast<off_t>(off)), 1);
      offsets.push_back(off);
    }
    auto elf = ElfFile::open_path(path);
    if (elf.ok()) exercise(*elf.value());
    for (uint64_t off : offsets) {
      ASSERT_EQ(pwrite(fd, &libc[off], 1, static_cast<off_t>(off)), 1);
    }
  }
  close(fd);
  unlink(path.c_str());
}

TEST(ElfFile, ReadSectionMatchesTheFile) {
  auto elf = ElfFile::open_path(kLibc);
  ASSERT_TRUE(elf.ok());
  const std::optional<ElfSection> eh = (*elf)->find_section(".eh_frame");
  ASSERT_TRUE(eh.has_value());
  auto data = (*elf)->read_section(".eh_frame", 64 << 20);
  ASSERT_TRUE(data.ok()) << data.error().message;
  EXPECT_EQ(data->vaddr, eh->vaddr);
  const std::vector<uint8_t> file = read_file(kLibc);
  ASSERT_EQ(data->bytes.size(), eh->size);
  EXPECT_TRUE(std::equal(data->bytes.begin(), data->bytes.end(),
                         file.begin() + static_cast<long>(eh->offset)));
  auto small = (*elf)->read_section(".eh_frame", eh->size - 1);
  ASSERT_FALSE(small.ok());
  EXPECT_EQ(small.error().code, EFBIG);
  auto missing = (*elf)->read_section(".no_such_section", 1 << 20);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, ENOENT);
  auto nobits = (*elf)->read_section(".bss", 1 << 20);
  ASSERT_FALSE(nobits.ok());
  EXPECT_EQ(nobits.error().code, ENOENT);
}

// A separate debug file as distributions ship them: SHF_COMPRESSED (zlib).
// The declared size bounds the output; a lie or corrupt data is an Error.
TEST(ElfFile, ReadSectionDecompressesAndDistrustsTheHeader) {
  const std::string debug = std::string(LW_TARGETS_DIR) + "/unwind_debug_frame.debug";
  auto elf = ElfFile::open_path(debug);
  ASSERT_TRUE(elf.ok()) << elf.error().message;
  const std::optional<ElfSection> df = (*elf)->find_section(".debug_frame");
  ASSERT_TRUE(df.has_value());
  ASSERT_NE(df->flags & SHF_COMPRESSED, 0u);
  std::vector<uint8_t> file = read_file(debug);
  Elf64_Chdr chdr;
  memcpy(&chdr, &file[df->offset], sizeof(chdr));
  auto data = (*elf)->read_section(".debug_frame", 1 << 20);
  ASSERT_TRUE(data.ok()) << data.error().message;
  EXPECT_EQ(data->bytes.size(), chdr.ch_size);
  EXPECT_EQ(data->bytes[4], 0xff);  // the first CIE's id, 0xffffffff
  EXPECT_FALSE((*elf)->read_section(".debug_frame", chdr.ch_size - 1).ok());

  auto variant = [&](const std::string& name, auto mutate) {
    std::vector<uint8_t> copy = file;
    mutate(copy);
    const std::string path = temp_path(name);
    write_file(path, copy.data(), copy.size());
    auto e = ElfFile::open_path(path);
    unlink(path.c_str());
    EXPECT_TRUE(e.ok());
    if (!e.ok()) return Error{0, "open failed"};
    auto r = (*e)->read_section(".debug_frame", 1 << 20);
    return r.ok() ? Error{0, ""} : r.error();
  };
  const size_t size_field = df->offset + offsetof(Elf64_Chdr, ch_size);
  Error bigger = variant("bigger", [&](std::vector<uint8_t>& f) { f[size_field] += 7; });
  EXPECT_EQ(bigger.code, EINVAL) << bigger.message;
  Error huge = variant("huge", [&](std::vector<uint8_t>& f) { f[size_field + 7] = 0x40; });
  EXPECT_EQ(huge.code, EFBIG) << huge.message;
  Error corrupt = variant("corrupt", [&](std::vector<uint8_t>& f) {
    for (size_t i = sizeof(Elf64_Chdr) + 2; i < df->size; ++i) f[df->offset + i] ^= 0x55;
  });
  EXPECT_EQ(corrupt.code, EINVAL) << corrupt.message;
  Error zstd = variant("zstd", [&](std::vector<uint8_t>& f) { f[df->offset] = 2; });
  EXPECT_EQ(zstd.code, ENOTSUP) << zstd.message;
}

}  // namespace
}  // namespace lw
