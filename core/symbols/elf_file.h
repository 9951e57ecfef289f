/* SPDX-License-Identifier: Apache-2.0 */
// Read-only, bounds-checked view of an ELF file (libelf underneath).
// Input is untrusted (it comes from target processes): every offset and size
// is checked, and hostile files give an Error, never a crash or a hang.
// Thread-safety: an ElfFile is immutable after open(); const methods may be
// called from several threads.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/platform/result.h"

namespace lw {

struct ElfSymbol {
  std::string name;   // without version suffix
  uint64_t vaddr = 0; // st_value
  uint64_t size = 0;  // st_size
};

// A section header, as indexed at open(); contents are read on demand.
struct ElfSection {
  std::string name;
  uint64_t vaddr = 0;   // sh_addr (0 for sections not loaded)
  uint64_t offset = 0;  // sh_offset
  uint64_t size = 0;    // sh_size (the compressed size for SHF_COMPRESSED)
  uint32_t type = 0;    // sh_type
  uint64_t flags = 0;   // sh_flags
};

// A section's contents read from the file: decompressed when the section
// is SHF_COMPRESSED (zlib), as separate debug files usually are.
struct ElfSectionData {
  uint64_t vaddr = 0;
  std::vector<uint8_t> bytes;
};

struct ElfSegment {   // a PT_LOAD program header
  uint64_t vaddr = 0, memsz = 0, offset = 0, filesz = 0;
  bool executable = false;
};

// Why open_fd() refused a file. Every refusal is counted by reason
// (elf_rejection_counts()), so hostile or broken objects show up in metrics.
enum class ElfReject : uint8_t {
  kNotRegular,          // not a regular file (FIFO, device, directory)
  kTooLarge,            // over the file size bound
  kNotElf,              // no ELF magic, or shorter than an ELF header
  kUnsupported,         // not 64-bit little-endian x86_64
  kBadHeader,           // header fields inconsistent (sizes, string table index)
  kBadProgramHeaders,   // program header table outside the file or oversized
  kBadSectionTable,     // section header table outside the file, bad e_shoff
  kTruncatedSection,    // a section's contents extend past the end of the file
  kOverlappingSections, // two sections' contents overlap
  kBadSymbolTable,      // wrong entry size, or a string table link that is not one
  kTooManySymbols,      // a symbol table over the symbol count bound
  kHugeStringTable,     // a string table over the size bound
  kLibelf,              // libelf refused it after the layout checks
  kCount,
};
const char* elf_reject_name(ElfReject r);  // "truncated_section", ...
// Refusals since the process started, indexed by ElfReject. Thread-safe.
std::vector<uint64_t> elf_rejection_counts();

// Bounds on untrusted ELF input, checked on the raw headers before libelf or
// libdw see the file (libdw bounds neither its time nor its memory).
inline constexpr uint64_t kElfMaxFileBytes = 4ull << 30;
inline constexpr size_t kElfMaxSections = 1u << 16;
inline constexpr size_t kElfMaxProgramHeaders = 1u << 16;
inline constexpr uint64_t kElfMaxSymbols = 4u << 20;              // per symbol table
inline constexpr uint64_t kElfMaxStringTableBytes = 256ull << 20;  // per string table

// Where an object's debug information may be (docs/architecture.md,
// "Symbolization"), as read from its sections.
struct ElfDebugLinks {
  std::string debuglink;           // .gnu_debuglink file name, "" when absent
  uint32_t debuglink_crc = 0;      // CRC-32 of the whole debug file
  std::string altlink;             // .gnu_debugaltlink (dwz) path, "" when absent
  std::string altlink_build_id;    // lowercase hex
  uint64_t debugdata_offset = 0;   // .gnu_debugdata (MiniDebugInfo, xz) in the file
  uint64_t debugdata_size = 0;     // 0: absent
  bool has_symtab = false;         // SHT_SYMTAB with contents
  bool has_debug_info = false;     // .debug_info with contents (not NOBITS)
  // What libelf would allocate to inflate this file's compressed sections
  // (SHF_COMPRESSED: the declared ch_size; GNU .zdebug_*: the declared
  // size), summed over every section, saturating. libdw inflates the DWARF
  // ones when it opens the file's DWARF, libdwfl the symbol and string
  // tables when it reads names; both trust the declared size (issue 32:
  // 1 MB of zlib declaring 1 GiB took the daemon to 1 GiB). The symbolizer
  // refuses what is over symbols.max_inflated_bytes before libdw sees it.
  uint64_t inflated_dwarf_bytes = 0;   // any compressed section but the ones below
  uint64_t inflated_symbol_bytes = 0;  // SHT_SYMTAB, SHT_DYNSYM, SHT_STRTAB, SHT_SYMTAB_SHNDX
};

struct ElfOpenOptions {
  // false: headers, build-id and debug links only (checking a candidate
  // debug file); find_function and friends then find nothing.
  bool index_symbols = true;
};

class ElfFile {
 public:
  // Opens and indexes the file. The fd is dup'ed; the caller keeps its own.
  // The layout is validated first (see ElfReject): a file that fails is
  // refused with an Error naming the reason, in well under a second and
  // without reading more than its headers.
  static Result<std::shared_ptr<const ElfFile>> open_fd(int fd, const std::string& display_path,
                                                        ElfOpenOptions options = {});
  static Result<std::shared_ptr<const ElfFile>> open_path(const std::string& path);
  ~ElfFile();

  const std::string& path() const { return path_; }
  // Lowercase hex of NT_GNU_BUILD_ID, or "" when the file has none.
  const std::string& build_id() const { return build_id_; }
  bool is_exec() const { return is_exec_; }  // ET_EXEC (non-PIE executable)
  // PT_INTERP present: the kernel starts the dynamic loader for it.
  bool has_interp() const { return has_interp_; }
  // DT_NEEDED entries in order, and DT_SONAME ("" when absent).
  const std::vector<std::string>& needed() const { return needed_; }
  const std::string& soname() const { return soname_; }
  // Function symbols indexed (.dynsym and .symtab); 0 for a stripped static binary.
  size_t function_count() const;
  // A Go binary: has a .go.buildinfo section (kept by strip) or Go runtime symbols.
  bool is_go() const { return is_go_; }
  const std::vector<ElfSegment>& segments() const { return segments_; }
  const ElfDebugLinks& debug_links() const { return debug_links_; }

  // Finds a defined function symbol by name in .dynsym, then .symtab.
  // For versioned symbols the default version (name@@VER) wins over hidden
  // ones (name@VER); `name` is given without a version.
  std::optional<ElfSymbol> find_function(std::string_view name) const;
  // Only a function this object exports for dynamic symbol resolution: in
  // .dynsym, global or weak, with an unversioned or default version. This is
  // what the dynamic linker can bind another object's reference to.
  std::optional<ElfSymbol> find_exported_function(std::string_view name) const;

  // The names of the functions this object exports (as find_exported_function
  // sees them) that start with one of `prefixes`, at most `max` of them.
  std::vector<std::string> exported_functions_with_prefix(const std::vector<std::string>& prefixes,
                                                          size_t max = 64) const;

  // A defined data object (STT_OBJECT), only for the few names the daemon
  // needs (kIndexedDataObjects in elf_file.cc: glibc's `__curbrk`).
  std::optional<ElfSymbol> find_data_object(std::string_view name) const;

  // Address translation through the PT_LOAD segments.
  std::optional<uint64_t> vaddr_to_offset(uint64_t vaddr) const;
  std::optional<uint64_t> offset_to_vaddr(uint64_t offset) const;

  // Up to `n` bytes of file content at `vaddr` (fewer at a segment's end).
  std::vector<uint8_t> read_at_vaddr(uint64_t vaddr, size_t n) const;
  // Up to `n` bytes at file offset `offset` (fewer at the end of the file).
  std::vector<uint8_t> read_at_offset(uint64_t offset, size_t n) const;

  // The first section with this name, if any (headers validated at open:
  // the contents of a non-NOBITS section lie inside the file).
  std::optional<ElfSection> find_section(std::string_view name) const;
  // The contents of the named section. Refused, with an Error saying why,
  // when there is no such section, when it is SHT_NOBITS, when its size (or
  // decompressed size) is over `max_bytes`, or when the file changed under
  // us (short read, corrupt compressed data).
  Result<ElfSectionData> read_section(std::string_view name, uint64_t max_bytes) const;

  ElfFile(const ElfFile&) = delete;
  ElfFile& operator=(const ElfFile&) = delete;

 private:
  ElfFile() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string path_;
  std::string build_id_;
  bool is_exec_ = false;
  bool has_interp_ = false;
  bool is_go_ = false;
  std::vector<std::string> needed_;
  std::string soname_;
  std::vector<ElfSegment> segments_;
  std::vector<ElfSection> sections_;
  ElfDebugLinks debug_links_;
};

}  // namespace lw
