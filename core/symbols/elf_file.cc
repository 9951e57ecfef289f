// SPDX-License-Identifier: Apache-2.0
#include "core/symbols/elf_file.h"

#include <fcntl.h>
#include <gelf.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <functional>
#include <unordered_map>

#include "core/platform/fd.h"

namespace lw {

namespace {

// Limits for untrusted input. Real objects are far below all of them.
constexpr uint64_t kMaxFileBytes = kElfMaxFileBytes;
constexpr size_t kMaxSymbols = 4u << 20;            // per file, .dynsym + .symtab
constexpr size_t kMaxSymbolNameBytes = 4096;        // longer names are not indexed
// Bounds index memory and hashing time: a string table can make N bytes yield
// N distinct overlapping names of total length N^2/2.
constexpr size_t kMaxIndexedNameBytes = 256u << 20;
constexpr size_t kMaxSections = kElfMaxSections;
constexpr size_t kMaxProgramHeaders = kElfMaxProgramHeaders;
constexpr size_t kMaxBuildIdBytes = 64;             // GNU ld emits 16 (md5) or 20 (sha1)
constexpr size_t kMaxNeeded = 1024;                 // DT_NEEDED entries kept
constexpr size_t kMaxDynamicEntries = 1u << 16;

// Section headers kept for find_section(): bounded so that a hostile file
// with 65,536 sections sharing one long name costs at most ~0.5 MiB.
constexpr size_t kMaxSectionNameBytes = 128;     // longer names are not indexed
constexpr size_t kMaxIndexedSections = 4096;     // real objects have < 100

constexpr uint16_t kVersymHidden = 0x8000;

bool init_libelf() {
  static const bool ok = elf_version(EV_CURRENT) != EV_NONE;
  return ok;
}

struct ElfCloser {
  void operator()(Elf* e) const { elf_end(e); }
};
using ElfPtr = std::unique_ptr<Elf, ElfCloser>;

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

bool range_in_file(uint64_t offset, uint64_t size, uint64_t file_size) {
  return offset <= file_size && size <= file_size - offset;
}

std::string hex(const uint8_t* p, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s;
  s.reserve(n * 2);
  for (size_t i = 0; i < n; ++i) {
    s += kDigits[p[i] >> 4];
    s += kDigits[p[i] & 0xf];
  }
  return s;
}

// The NT_GNU_BUILD_ID descriptor in a block of notes, or "".
std::string build_id_from_notes(Elf_Data* data) {
  if (data == nullptr || data->d_buf == nullptr) return "";
  GElf_Nhdr nhdr;
  size_t offset = 0, name_off = 0, desc_off = 0;
  // gelf_getnote bounds-checks each note against d_size and returns 0 at the
  // end or on a corrupt header, so this terminates.
  while ((offset = gelf_getnote(data, offset, &nhdr, &name_off, &desc_off)) > 0) {
    const auto* base = static_cast<const uint8_t*>(data->d_buf);
    if (nhdr.n_type == NT_GNU_BUILD_ID && nhdr.n_namesz == sizeof(ELF_NOTE_GNU) &&
        memcmp(base + name_off, ELF_NOTE_GNU, sizeof(ELF_NOTE_GNU)) == 0 && nhdr.n_descsz > 0 &&
        nhdr.n_descsz <= kMaxBuildIdBytes) {
      return hex(base + desc_off, nhdr.n_descsz);
    }
  }
  return "";
}

std::array<std::atomic<uint64_t>, static_cast<size_t>(ElfReject::kCount)> g_rejections{};

struct Rejection {
  ElfReject reason;
  std::string message;
};

Error reject(const std::string& path, const Rejection& r) {
  g_rejections[static_cast<size_t>(r.reason)].fetch_add(1, std::memory_order_relaxed);
  return Error{EINVAL, path + ": " + r.message};
}

bool pread_full(int fd, void* buf, size_t n, uint64_t offset) {
  auto* p = static_cast<uint8_t*>(buf);
  size_t got = 0;
  while (got < n) {
    ssize_t r = pread(fd, p + got, n - got, static_cast<off_t>(offset + got));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    got += static_cast<size_t>(r);
  }
  return true;
}

// Checks the layout from the raw headers, before libelf maps the file and
// before libdw ever sees it. Reads at most the ELF header, the program
// header table and the section header table (bounded by kElfMaxSections:
// 4 MiB). Real objects pass every check (test: every ELF file under
// /usr/lib and /usr/bin of the build machine opens).
std::optional<Rejection> validate_layout(int fd, uint64_t file_size) {
  Elf64_Ehdr eh;
  if (file_size < sizeof(eh) || !pread_full(fd, &eh, sizeof(eh), 0) ||
      memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0) {
    return Rejection{ElfReject::kNotElf, "not an ELF file"};
  }
  if (eh.e_ident[EI_CLASS] != ELFCLASS64) {
    return Rejection{ElfReject::kUnsupported, "not a 64-bit ELF file"};
  }
  if (eh.e_ident[EI_DATA] != ELFDATA2LSB) {
    return Rejection{ElfReject::kUnsupported, "not a little-endian ELF file"};
  }
  if (eh.e_machine != EM_X86_64) {
    return Rejection{ElfReject::kUnsupported, "not an x86_64 ELF file (e_machine " +
                                                  std::to_string(eh.e_machine) + ")"};
  }
  if (eh.e_ehsize != sizeof(Elf64_Ehdr)) {
    return Rejection{ElfReject::kBadHeader, "bad ELF header size " + std::to_string(eh.e_ehsize)};
  }
  if (eh.e_phnum > 0) {
    if (eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phnum == PN_XNUM ||
        !range_in_file(eh.e_phoff, uint64_t{eh.e_phnum} * sizeof(Elf64_Phdr), file_size)) {
      return Rejection{ElfReject::kBadProgramHeaders,
                       "program header table outside the file (e_phoff " +
                           std::to_string(eh.e_phoff) + ", " + std::to_string(eh.e_phnum) +
                           " entries)"};
    }
  }
  if (eh.e_shoff == 0) {
    // No section headers (sstrip'ed): no symbols, but nothing to distrust.
    if (eh.e_shnum != 0) return Rejection{ElfReject::kBadSectionTable, "e_shnum without e_shoff"};
    return std::nullopt;
  }
  if (eh.e_shentsize != sizeof(Elf64_Shdr) || eh.e_shoff >= file_size ||
      file_size - eh.e_shoff < sizeof(Elf64_Shdr)) {
    return Rejection{ElfReject::kBadSectionTable,
                     "section header table outside the file (e_shoff " +
                         std::to_string(eh.e_shoff) + ", file " + std::to_string(file_size) +
                         " bytes)"};
  }
  Elf64_Shdr first;
  if (!pread_full(fd, &first, sizeof(first), eh.e_shoff)) {
    return Rejection{ElfReject::kBadSectionTable, "section header table unreadable"};
  }
  // Extended numbering: counts too large for the header live in section 0.
  const uint64_t shnum = eh.e_shnum != 0 ? eh.e_shnum : first.sh_size;
  const uint64_t shstrndx = eh.e_shstrndx != SHN_XINDEX ? eh.e_shstrndx : first.sh_link;
  if (shnum == 0 || shnum > kMaxSections ||
      !range_in_file(eh.e_shoff, shnum * sizeof(Elf64_Shdr), file_size)) {
    return Rejection{ElfReject::kBadSectionTable,
                     "section header table outside the file or oversized (" +
                         std::to_string(shnum) + " sections at e_shoff " +
                         std::to_string(eh.e_shoff) + ")"};
  }
  if (shstrndx >= shnum) {
    return Rejection{ElfReject::kBadHeader,
                     "section name table index " + std::to_string(shstrndx) + " out of range"};
  }
  std::vector<Elf64_Shdr> sh(shnum);
  if (!pread_full(fd, sh.data(), shnum * sizeof(Elf64_Shdr), eh.e_shoff)) {
    return Rejection{ElfReject::kBadSectionTable, "section header table unreadable"};
  }
  std::vector<std::pair<uint64_t, uint64_t>> extents;  // [offset, end) of file contents
  for (uint64_t i = 1; i < shnum; ++i) {
    const Elf64_Shdr& s = sh[i];
    const std::string which = "section " + std::to_string(i);
    if (s.sh_type == SHT_NOBITS || s.sh_type == SHT_NULL || s.sh_size == 0) continue;
    if (!range_in_file(s.sh_offset, s.sh_size, file_size)) {
      return Rejection{ElfReject::kTruncatedSection,
                       which + " extends past the end of the file (offset " +
                           std::to_string(s.sh_offset) + ", size " + std::to_string(s.sh_size) +
                           ", file " + std::to_string(file_size) + " bytes)"};
    }
    extents.emplace_back(s.sh_offset, s.sh_offset + s.sh_size);
    if (s.sh_type == SHT_SYMTAB || s.sh_type == SHT_DYNSYM) {
      if (s.sh_entsize != sizeof(Elf64_Sym) || s.sh_link >= shnum ||
          sh[s.sh_link].sh_type != SHT_STRTAB) {
        return Rejection{ElfReject::kBadSymbolTable,
                         which + ": symbol table with entry size " +
                             std::to_string(s.sh_entsize) + " or string table link " +
                             std::to_string(s.sh_link) + " that is not one"};
      }
      if (s.sh_size / sizeof(Elf64_Sym) > kElfMaxSymbols) {
        return Rejection{ElfReject::kTooManySymbols,
                         which + ": " + std::to_string(s.sh_size / sizeof(Elf64_Sym)) +
                             " symbols (limit " + std::to_string(kElfMaxSymbols) + ")"};
      }
    } else if (s.sh_type == SHT_STRTAB && s.sh_size > kElfMaxStringTableBytes) {
      return Rejection{ElfReject::kHugeStringTable,
                       which + ": string table of " + std::to_string(s.sh_size) +
                           " bytes (limit " + std::to_string(kElfMaxStringTableBytes) + ")"};
    }
  }
  std::sort(extents.begin(), extents.end());
  for (size_t i = 1; i < extents.size(); ++i) {
    if (extents[i].first < extents[i - 1].second) {
      return Rejection{ElfReject::kOverlappingSections,
                       "sections overlap at file offset " + std::to_string(extents[i].first)};
    }
  }
  return std::nullopt;
}

// The size of the regular file `fd`, once it has passed the size bound and
// validate_layout; else why not.
Result<uint64_t> checked_file_size(int fd, const std::string& display_path) {
  struct stat st;
  if (fstat(fd, &st) != 0) return errno_error("fstat " + display_path);
  if (!S_ISREG(st.st_mode)) {
    return reject(display_path, {ElfReject::kNotRegular, "not a regular file"});
  }
  const auto file_size = static_cast<uint64_t>(st.st_size);
  if (file_size > kMaxFileBytes) {
    Error e = reject(display_path, {ElfReject::kTooLarge, "file too large (" +
                                                              std::to_string(file_size) +
                                                              " bytes)"});
    e.code = EFBIG;
    return e;
  }
  if (std::optional<Rejection> r = validate_layout(fd, file_size)) {
    return reject(display_path, *r);
  }
  return file_size;
}

}  // namespace

const char* elf_reject_name(ElfReject r) {
  switch (r) {
    case ElfReject::kNotRegular: return "not_regular";
    case ElfReject::kTooLarge: return "too_large";
    case ElfReject::kNotElf: return "not_elf";
    case ElfReject::kUnsupported: return "unsupported";
    case ElfReject::kBadHeader: return "bad_header";
    case ElfReject::kBadProgramHeaders: return "bad_program_headers";
    case ElfReject::kBadSectionTable: return "bad_section_table";
    case ElfReject::kTruncatedSection: return "truncated_section";
    case ElfReject::kOverlappingSections: return "overlapping_sections";
    case ElfReject::kBadSymbolTable: return "bad_symbol_table";
    case ElfReject::kTooManySymbols: return "too_many_symbols";
    case ElfReject::kHugeStringTable: return "huge_string_table";
    case ElfReject::kLibelf: return "libelf";
    case ElfReject::kCount: break;
  }
  return "unknown";
}

std::vector<uint64_t> elf_rejection_counts() {
  std::vector<uint64_t> out;
  for (const auto& c : g_rejections) out.push_back(c.load(std::memory_order_relaxed));
  return out;
}

// The data symbols find_data_object() can return. Only these are indexed:
// a library can have hundreds of thousands of data symbols.
constexpr std::string_view kIndexedDataObjects[] = {
    "__curbrk",  // glibc: the break before a brk() call (decision libc-syscall-wrappers)
    // CPython (core/symbols/python_runtime.h): the runtime state, the version
    // constant (3.11+) and the code object type.
    "_PyRuntime", "Py_Version", "PyCode_Type",
};

// Longest debug link name kept: a file name, so NAME_MAX would do, but a
// path-like name is refused later by the lookup anyway.
static constexpr size_t kMaxDebugLinkName = 4096;

// Fills `out` from .gnu_debuglink, .gnu_debugaltlink, .gnu_debugdata and
// .debug_info, whichever `scn` is. Contents are bounded by the layout
// checks already done (the section lies inside the file).
static void read_debug_link(Elf_Scn* scn, const GElf_Shdr& shdr, const char* name,
                            ElfDebugLinks& out) {
  if (strcmp(name, ".debug_info") == 0) {
    out.has_debug_info = shdr.sh_type != SHT_NOBITS && shdr.sh_size > 0;
    return;
  }
  if (strcmp(name, ".gnu_debugdata") == 0) {
    if (shdr.sh_type == SHT_NOBITS) return;
    out.debugdata_offset = shdr.sh_offset;
    out.debugdata_size = shdr.sh_size;
    return;
  }
  const bool debuglink = strcmp(name, ".gnu_debuglink") == 0;
  const bool altlink = strcmp(name, ".gnu_debugaltlink") == 0;
  if ((!debuglink && !altlink) || shdr.sh_type == SHT_NOBITS) return;
  // Raw bytes: the CRC is in the file's byte order (little-endian here,
  // the only class open_fd accepts), not converted by libelf's types.
  Elf_Data* data = elf_rawdata(scn, nullptr);
  if (data == nullptr || data->d_buf == nullptr || data->d_size == 0) return;
  const auto* p = static_cast<const uint8_t*>(data->d_buf);
  const size_t size = data->d_size;
  const void* nul = memchr(p, '\0', std::min(size, kMaxDebugLinkName + 1));
  if (nul == nullptr) return;
  const size_t name_len = static_cast<size_t>(static_cast<const uint8_t*>(nul) - p);
  if (name_len == 0) return;
  if (debuglink) {
    // NUL, padding to 4, then the CRC.
    const size_t crc_at = (name_len + 1 + 3) & ~size_t{3};
    if (crc_at + 4 > size) return;
    out.debuglink.assign(reinterpret_cast<const char*>(p), name_len);
    out.debuglink_crc = static_cast<uint32_t>(p[crc_at]) | static_cast<uint32_t>(p[crc_at + 1]) << 8 |
                        static_cast<uint32_t>(p[crc_at + 2]) << 16 |
                        static_cast<uint32_t>(p[crc_at + 3]) << 24;
  } else {
    const size_t id_len = size - name_len - 1;
    if (id_len == 0 || id_len > kMaxBuildIdBytes) return;
    out.altlink.assign(reinterpret_cast<const char*>(p), name_len);
    out.altlink_build_id = hex(p + name_len + 1, id_len);
  }
}

struct ElfFile::Impl {
  // What find_function returns for a name: the best-ranked candidate.
  struct Candidate {
    uint64_t vaddr;
    uint64_t size;
    unsigned rank;  // lower wins; see rank_of()
  };

  int fd = -1;  // our dup; libelf's mapping is dropped after indexing
  uint64_t file_size = 0;
  std::unordered_map<std::string, Candidate, StringHash, std::equal_to<>> functions;
  // Data objects, only those named in kIndexedDataObjects (bounded).
  std::unordered_map<std::string, Candidate, StringHash, std::equal_to<>> data_objects;
  size_t symbols_seen = 0;
  size_t name_bytes = 0;

  ~Impl() {
    if (fd >= 0) close(fd);
  }

  // Preference, most important first: a default or unversioned symbol over a
  // hidden (name@VER) one; .dynsym over .symtab; global/weak over local.
  static unsigned rank_of(bool hidden, bool from_symtab, bool local) {
    return (hidden ? 4u : 0u) | (from_symtab ? 2u : 0u) | (local ? 1u : 0u);
  }

  void add(std::string_view name, const GElf_Sym& sym, unsigned rank) {
    if (name.empty() || name.size() > kMaxSymbolNameBytes) return;
    const Candidate candidate{sym.st_value, sym.st_size, rank};
    auto it = functions.find(name);
    if (it != functions.end()) {
      if (rank < it->second.rank) it->second = candidate;
      return;
    }
    if (name_bytes + name.size() > kMaxIndexedNameBytes) return;
    name_bytes += name.size();
    functions.emplace(std::string(name), candidate);
  }

  // Indexes the function symbols of one SHT_DYNSYM/SHT_SYMTAB section.
  // `versym` (may be null) is .gnu.version, parallel to .dynsym.
  void index_symbols(Elf* elf, Elf_Scn* scn, const GElf_Shdr& shdr, Elf_Data* versym) {
    if (shdr.sh_entsize != sizeof(Elf64_Sym)) return;
    Elf_Data* data = elf_getdata(scn, nullptr);
    if (data == nullptr) return;
    const bool from_symtab = shdr.sh_type == SHT_SYMTAB;
    const size_t count = data->d_size / sizeof(Elf64_Sym);
    const size_t versym_count = versym != nullptr ? versym->d_size / sizeof(GElf_Versym) : 0;
    for (size_t i = 1; i < count && symbols_seen < kMaxSymbols; ++i, ++symbols_seen) {
      GElf_Sym sym;
      if (gelf_getsym(data, static_cast<int>(i), &sym) == nullptr) break;
      const int type = GELF_ST_TYPE(sym.st_info);
      const bool data = type == STT_OBJECT;
      if ((type != STT_FUNC && type != STT_GNU_IFUNC && !data) || sym.st_shndx == SHN_UNDEF ||
          sym.st_value == 0) {
        continue;
      }
      // elf_strptr checks the offset and the NUL terminator against the
      // string table section.
      const char* raw = elf_strptr(elf, shdr.sh_link, sym.st_name);
      if (raw == nullptr) continue;
      std::string_view name(raw);
      bool hidden = false;
      if (!from_symtab) {
        GElf_Versym vs;
        if (i < versym_count && gelf_getversym(versym, static_cast<int>(i), &vs) != nullptr) {
          hidden = (vs & kVersymHidden) != 0;
        }
      } else if (size_t at = name.find('@'); at != std::string_view::npos) {
        // .symtab carries versions in the name: name@@VER (default), name@VER.
        hidden = name.substr(at, 2) != "@@";
        name = name.substr(0, at);
      }
      const bool local = GELF_ST_BIND(sym.st_info) == STB_LOCAL;
      if (data) {
        if (std::find(std::begin(kIndexedDataObjects), std::end(kIndexedDataObjects), name) ==
            std::end(kIndexedDataObjects))
          continue;
        const Candidate c{sym.st_value, sym.st_size, rank_of(hidden, from_symtab, local)};
        auto [it, inserted] = data_objects.emplace(std::string(name), c);
        if (!inserted && c.rank < it->second.rank) it->second = c;
        continue;
      }
      add(name, sym, rank_of(hidden, from_symtab, local));
    }
  }

  // A symbol table section, kept from the section pass for the symbol pass.
  struct SymTab {
    Elf_Scn* scn;
    GElf_Shdr shdr;
  };
  // What the section pass finds for the symbol pass.
  struct SectionScan {
    std::vector<SymTab> symtabs;
    Elf_Data* versym = nullptr;  // .gnu.version, parallel to .dynsym
  };

  // Program headers: PT_LOAD segments, PT_INTERP, and the build-id from PT_NOTE.
  void read_program_headers(Elf* elf, ElfFile& file) const {
    size_t phnum = 0;
    if (elf_getphdrnum(elf, &phnum) != 0) phnum = 0;
    phnum = std::min(phnum, kMaxProgramHeaders);
    for (size_t i = 0; i < phnum; ++i) {
      GElf_Phdr ph;
      if (gelf_getphdr(elf, static_cast<int>(i), &ph) == nullptr) break;
      if (!range_in_file(ph.p_offset, ph.p_filesz, file_size)) continue;
      if (ph.p_type == PT_INTERP) file.has_interp_ = true;
      if (ph.p_type == PT_LOAD) {
        if (ph.p_filesz > ph.p_memsz || ph.p_vaddr > UINT64_MAX - ph.p_memsz) continue;
        file.segments_.push_back(
            {ph.p_vaddr, ph.p_memsz, ph.p_offset, ph.p_filesz, (ph.p_flags & PF_X) != 0});
      } else if (ph.p_type == PT_NOTE && file.build_id_.empty()) {
        Elf_Data* notes = elf_getdata_rawchunk(elf, static_cast<int64_t>(ph.p_offset),
                                               ph.p_filesz,
                                               ph.p_align == 8 ? ELF_T_NHDR8 : ELF_T_NHDR);
        file.build_id_ = build_id_from_notes(notes);
      }
    }
  }

  // DT_NEEDED and DT_SONAME from the SHT_DYNAMIC section `scn`.
  static void read_dynamic(Elf* elf, Elf_Scn* scn, const GElf_Shdr& shdr, ElfFile& file) {
    Elf_Data* dyn = elf_getdata(scn, nullptr);
    if (dyn == nullptr || shdr.sh_entsize != sizeof(Elf64_Dyn)) return;
    const size_t count = std::min(dyn->d_size / sizeof(Elf64_Dyn), kMaxDynamicEntries);
    for (size_t i = 0; i < count; ++i) {
      GElf_Dyn d;
      if (gelf_getdyn(dyn, static_cast<int>(i), &d) == nullptr || d.d_tag == DT_NULL) break;
      if (d.d_tag != DT_NEEDED && d.d_tag != DT_SONAME) continue;
      const char* str = elf_strptr(elf, shdr.sh_link, d.d_un.d_val);
      if (str == nullptr || strlen(str) > kMaxSymbolNameBytes) continue;
      if (d.d_tag == DT_SONAME) file.soname_ = str;
      else if (file.needed_.size() < kMaxNeeded) file.needed_.emplace_back(str);
    }
  }

  // The size libelf would inflate `shdr`'s section to, from its own header
  // (read with pread: 24 bytes, not the section), added to `out`'s sums.
  // Every section counts, indexed or not: libdw scans them all.
  void add_inflated_size(const GElf_Shdr& shdr, const char* name, ElfDebugLinks& out) const {
    if (shdr.sh_type == SHT_NOBITS) return;
    uint64_t declared = 0;
    if ((shdr.sh_flags & SHF_COMPRESSED) != 0) {
      Elf64_Chdr chdr;
      // A header libelf cannot read is not inflated by it either.
      if (shdr.sh_size < sizeof(chdr) || !pread_full(fd, &chdr, sizeof(chdr), shdr.sh_offset)) return;
      declared = chdr.ch_size;  // whatever ch_type says: newer libelf reads zstd too
    } else if (name != nullptr && strncmp(name, ".zdebug", 7) == 0) {
      // GNU style: "ZLIB", then the size as 8 bytes big-endian.
      uint8_t gnu[12];
      if (shdr.sh_size < sizeof(gnu) || !pread_full(fd, gnu, sizeof(gnu), shdr.sh_offset) ||
          memcmp(gnu, "ZLIB", 4) != 0)
        return;
      for (int i = 4; i < 12; ++i) declared = declared << 8 | gnu[i];
    } else {
      return;
    }
    const bool symbols = shdr.sh_type == SHT_SYMTAB || shdr.sh_type == SHT_DYNSYM ||
                         shdr.sh_type == SHT_STRTAB || shdr.sh_type == SHT_SYMTAB_SHNDX;
    uint64_t& sum = symbols ? out.inflated_symbol_bytes : out.inflated_dwarf_bytes;
    sum = declared > UINT64_MAX - sum ? UINT64_MAX : sum + declared;
  }

  // Sections: the indexed section list, debug links, the dynamic section,
  // notes for files without PT_NOTE, and the symbol tables for the symbol pass.
  SectionScan read_sections(Elf* elf, ElfFile& file) const {
    SectionScan scan;
    Elf_Scn* scn = nullptr;
    size_t shstrndx = 0;
    const bool have_shstrndx = elf_getshdrstrndx(elf, &shstrndx) == 0;
    for (size_t n = 0; n < kMaxSections && (scn = elf_nextscn(elf, scn)) != nullptr; ++n) {
      GElf_Shdr shdr;
      if (gelf_getshdr(scn, &shdr) == nullptr) continue;
      if (shdr.sh_type != SHT_NOBITS && !range_in_file(shdr.sh_offset, shdr.sh_size, file_size)) {
        continue;
      }
      if (have_shstrndx) {
        const char* name = elf_strptr(elf, shstrndx, shdr.sh_name);
        if (name != nullptr && strcmp(name, ".go.buildinfo") == 0) file.is_go_ = true;
        if (name != nullptr && strlen(name) <= kMaxSectionNameBytes &&
            file.sections_.size() < kMaxIndexedSections) {
          file.sections_.push_back({name, shdr.sh_addr, shdr.sh_offset, shdr.sh_size,
                                    shdr.sh_type, shdr.sh_flags});
        }
        if (name != nullptr) read_debug_link(scn, shdr, name, file.debug_links_);
      }
      if (shdr.sh_type == SHT_SYMTAB && shdr.sh_size > 0) file.debug_links_.has_symtab = true;
      if (have_shstrndx) add_inflated_size(shdr, elf_strptr(elf, shstrndx, shdr.sh_name), file.debug_links_);
      switch (shdr.sh_type) {
        case SHT_DYNAMIC:
          read_dynamic(elf, scn, shdr, file);
          break;
        case SHT_DYNSYM:
        case SHT_SYMTAB:
          scan.symtabs.push_back({scn, shdr});
          break;
        case SHT_GNU_versym:
          scan.versym = elf_getdata(scn, nullptr);
          break;
        case SHT_NOTE:
          if (file.build_id_.empty()) {
            file.build_id_ = build_id_from_notes(elf_getdata(scn, nullptr));
          }
          break;
        default:
          break;
      }
    }
    return scan;
  }

  // Indexes the symbol tables the section pass found, each with a valid
  // string table.
  void index_symbol_tables(Elf* elf, SectionScan& scan) {
    // .dynsym first so that its (versioned) entries are seen before .symtab's.
    std::stable_sort(scan.symtabs.begin(), scan.symtabs.end(), [](const SymTab& a, const SymTab& b) {
      return a.shdr.sh_type == SHT_DYNSYM && b.shdr.sh_type != SHT_DYNSYM;
    });
    for (const SymTab& t : scan.symtabs) {
      GElf_Shdr strtab;
      Elf_Scn* str_scn = elf_getscn(elf, t.shdr.sh_link);
      if (str_scn == nullptr || gelf_getshdr(str_scn, &strtab) == nullptr ||
          strtab.sh_type != SHT_STRTAB ||
          !range_in_file(strtab.sh_offset, strtab.sh_size, file_size)) {
        continue;
      }
      index_symbols(elf, t.scn, t.shdr, t.shdr.sh_type == SHT_DYNSYM ? scan.versym : nullptr);
    }
  }
};

ElfFile::~ElfFile() = default;

Result<std::shared_ptr<const ElfFile>> ElfFile::open_path(const std::string& path) {
  // Regular files only, O_NONBLOCK (a FIFO must not hang the daemon), and a
  // /proc/PID/root/... path resolved inside that root (fd.h).
  Result<int> opened = open_untrusted_file(path);
  if (!opened) {
    if (opened.error().code == EINVAL) {
      return reject(path, {ElfReject::kNotRegular, "not a regular file"});
    }
    return opened.error();
  }
  const int fd = *opened;
  auto result = open_fd(fd, path);
  close(fd);
  return result;
}

Result<std::shared_ptr<const ElfFile>> ElfFile::open_fd(int fd, const std::string& display_path,
                                                       ElfOpenOptions options) {
  if (!init_libelf()) return Error{0, "libelf initialization failed"};

  std::shared_ptr<ElfFile> file(new ElfFile());
  file->path_ = display_path;
  file->impl_ = std::make_unique<Impl>();
  Impl& impl = *file->impl_;
  impl.fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (impl.fd < 0) return errno_error("dup fd of " + display_path);
  Result<uint64_t> file_size = checked_file_size(impl.fd, display_path);
  if (!file_size) return file_size.error();
  impl.file_size = *file_size;

  // The mapping lives only while indexing; later reads use pread. A target
  // may truncate its own file, and touching a mapped page past the new end
  // raises SIGBUS, so the window for that is kept as short as possible.
  ElfPtr elf(elf_begin(impl.fd, ELF_C_READ_MMAP, nullptr));
  GElf_Ehdr ehdr;
  if (!elf || elf_kind(elf.get()) != ELF_K_ELF || gelf_getclass(elf.get()) != ELFCLASS64 ||
      gelf_getehdr(elf.get(), &ehdr) == nullptr) {
    return reject(display_path, {ElfReject::kLibelf, std::string("libelf: ") + elf_errmsg(-1)});
  }
  file->is_exec_ = ehdr.e_type == ET_EXEC;
  impl.read_program_headers(elf.get(), *file);
  Impl::SectionScan scan = impl.read_sections(elf.get(), *file);
  if (options.index_symbols) impl.index_symbol_tables(elf.get(), scan);
  // Go binaries built before .go.buildinfo (Go < 1.18) still name their runtime.
  if (!file->is_go_ && impl.functions.count("runtime.goexit") != 0) file->is_go_ = true;

  return std::shared_ptr<const ElfFile>(std::move(file));
}

size_t ElfFile::function_count() const { return impl_->functions.size(); }

std::optional<ElfSymbol> ElfFile::find_exported_function(std::string_view name) const {
  auto it = impl_->functions.find(name);
  // rank 0: from .dynsym, not local, not a hidden version (see rank_of).
  if (it == impl_->functions.end() || it->second.rank != 0) return std::nullopt;
  return ElfSymbol{it->first, it->second.vaddr, it->second.size};
}

std::vector<std::string> ElfFile::exported_functions_with_prefix(
    const std::vector<std::string>& prefixes, size_t max) const {
  std::vector<std::string> out;
  for (const auto& [name, c] : impl_->functions) {
    if (c.rank != 0) continue;
    for (const std::string& p : prefixes)
      if (name.compare(0, p.size(), p) == 0) {
        out.push_back(name);
        break;
      }
    if (out.size() >= max) break;
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::optional<ElfSymbol> ElfFile::find_function(std::string_view name) const {
  auto it = impl_->functions.find(name);
  if (it == impl_->functions.end()) return std::nullopt;
  return ElfSymbol{it->first, it->second.vaddr, it->second.size};
}

std::optional<ElfSymbol> ElfFile::find_data_object(std::string_view name) const {
  auto it = impl_->data_objects.find(name);
  if (it == impl_->data_objects.end()) return std::nullopt;
  return ElfSymbol{it->first, it->second.vaddr, it->second.size};
}

std::optional<uint64_t> ElfFile::vaddr_to_offset(uint64_t vaddr) const {
  for (const ElfSegment& s : segments_) {
    if (vaddr >= s.vaddr && vaddr - s.vaddr < s.filesz) return s.offset + (vaddr - s.vaddr);
  }
  return std::nullopt;
}

std::optional<uint64_t> ElfFile::offset_to_vaddr(uint64_t offset) const {
  for (const ElfSegment& s : segments_) {
    if (offset >= s.offset && offset - s.offset < s.filesz) return s.vaddr + (offset - s.offset);
  }
  return std::nullopt;
}

std::vector<uint8_t> ElfFile::read_at_offset(uint64_t offset, size_t n) const {
  std::vector<uint8_t> out;
  if (offset >= impl_->file_size) return out;
  out.resize(static_cast<size_t>(std::min<uint64_t>(n, impl_->file_size - offset)));
  size_t got = 0;
  while (got < out.size()) {
    ssize_t r = pread(impl_->fd, out.data() + got, out.size() - got, static_cast<off_t>(offset + got));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;  // error, or the file shrank since open()
    got += static_cast<size_t>(r);
  }
  out.resize(got);
  return out;
}

std::vector<uint8_t> ElfFile::read_at_vaddr(uint64_t vaddr, size_t n) const {
  std::vector<uint8_t> out;
  for (const ElfSegment& s : segments_) {
    if (vaddr < s.vaddr || vaddr - s.vaddr >= s.filesz) continue;
    const uint64_t delta = vaddr - s.vaddr;
    out.resize(static_cast<size_t>(std::min<uint64_t>(n, s.filesz - delta)));
    size_t got = 0;
    while (got < out.size()) {
      ssize_t r = pread(impl_->fd, out.data() + got, out.size() - got,
                        static_cast<off_t>(s.offset + delta + got));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;  // error, or the file shrank since open()
      got += static_cast<size_t>(r);
    }
    out.resize(got);
    break;
  }
  return out;
}

std::optional<ElfSection> ElfFile::find_section(std::string_view name) const {
  for (const ElfSection& s : sections_) {
    if (s.name == name) return s;
  }
  return std::nullopt;
}

Result<ElfSectionData> ElfFile::read_section(std::string_view name, uint64_t max_bytes) const {
  const std::optional<ElfSection> section = find_section(name);
  const std::string what = path_ + ": section " + std::string(name);
  if (!section) return Error{ENOENT, what + ": not found"};
  if (section->type == SHT_NOBITS) return Error{ENOENT, what + ": has no contents (NOBITS)"};
  // validate_layout() checked this against the size at open; the file may
  // have shrunk since, which the short read below catches.
  if (!range_in_file(section->offset, section->size, impl_->file_size)) {
    return Error{EINVAL, what + ": outside the file"};
  }
  const bool compressed = (section->flags & SHF_COMPRESSED) != 0;
  // A compressed section is read whole before inflating: bounded the same.
  if (section->size > max_bytes) {
    return Error{EFBIG, what + ": " + std::to_string(section->size) +
                            (compressed ? " compressed" : "") + " bytes (limit " +
                            std::to_string(max_bytes) + ")"};
  }
  std::vector<uint8_t> raw(static_cast<size_t>(section->size));
  if (!raw.empty() && !pread_full(impl_->fd, raw.data(), raw.size(), section->offset)) {
    return Error{EIO, what + ": short read (the file changed since it was opened?)"};
  }
  ElfSectionData out;
  out.vaddr = section->vaddr;
  if (!compressed) {
    out.bytes = std::move(raw);
    return out;
  }
  Elf64_Chdr chdr;
  if (raw.size() < sizeof(chdr)) return Error{EINVAL, what + ": compression header truncated"};
  memcpy(&chdr, raw.data(), sizeof(chdr));
  if (chdr.ch_type != ELFCOMPRESS_ZLIB) {
    return Error{ENOTSUP, what + ": compression type " + std::to_string(chdr.ch_type) +
                              " (only zlib is read)"};
  }
  if (chdr.ch_size > max_bytes) {
    return Error{EFBIG, what + ": " + std::to_string(chdr.ch_size) +
                            " bytes decompressed (limit " + std::to_string(max_bytes) + ")"};
  }
  out.bytes.resize(static_cast<size_t>(chdr.ch_size));
  uLongf produced = static_cast<uLongf>(out.bytes.size());
  // uncompress() writes at most `produced` bytes: the declared size bounds
  // the output whatever the stream says.
  const int rc = uncompress(out.bytes.data(), &produced, raw.data() + sizeof(chdr),
                            static_cast<uLong>(raw.size() - sizeof(chdr)));
  if (rc != Z_OK || produced != out.bytes.size()) {
    return Error{EINVAL, what + ": corrupt zlib data or wrong declared size"};
  }
  return out;
}

}  // namespace lw
