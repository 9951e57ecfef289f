// SPDX-License-Identifier: Apache-2.0
#include "core/symbols/symbolizer.h"

#include <cxxabi.h>
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#include <inttypes.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <list>
#include <optional>
#include <unordered_map>

#include "core/symbols/elf_file.h"
#include "core/platform/fd.h"
#include "core/platform/log.h"

namespace lw {

namespace {

// The demangler recurses on the input; very long (hostile) names are
// returned as they are rather than handed to it.
constexpr size_t kMaxDemangleBytes = 8192;
// Inline chains deeper than this are cut (hostile DWARF can nest scopes
// arbitrarily; real code rarely goes past 10).
constexpr size_t kMaxInlineDepth = 32;

// Our search (core/symbols/debug_file.h) has already found the files; libdwfl's own
// search path is never consulted.
char* g_debuginfo_path = nullptr;

// The files found for one module, handed to libdwfl by find_debuginfo().
struct DebugFiles {
  DebugFile debug;  // fd invalid: none
  DebugFile alt;    // the .gnu_debugaltlink (dwz) file, fd invalid: none
  std::string altlink;
  bool debug_handed = false;
  bool alt_handed = false;
};

int no_elf(Dwfl_Module*, void**, const char*, Dwarf_Addr, char**, Elf**) { return -1; }

// libdwfl calls this once for the module's debug file, and once more with
// the .gnu_debugaltlink name for a dwz file. It takes ownership of the fd.
int hand_out_debuginfo(Dwfl_Module*, void** userdata, const char*, Dwarf_Addr, const char*,
                       const char* debuglink_file, GElf_Word, char**) {
  auto* files = userdata != nullptr ? static_cast<DebugFiles*>(*userdata) : nullptr;
  if (files == nullptr) return -1;
  if (!files->debug_handed) {
    files->debug_handed = true;
    if (files->debug.fd.valid()) return fcntl(files->debug.fd.get(), F_DUPFD_CLOEXEC, 0);
    return -1;
  }
  if (!files->alt_handed && files->alt.fd.valid() && debuglink_file != nullptr &&
      files->altlink == debuglink_file) {
    files->alt_handed = true;
    return fcntl(files->alt.fd.get(), F_DUPFD_CLOEXEC, 0);
  }
  return -1;
}

const Dwfl_Callbacks kCallbacks = {
    .find_elf = no_elf,
    .find_debuginfo = hand_out_debuginfo,
    .section_address = dwfl_offline_section_address,
    .debuginfo_path = &g_debuginfo_path,
};

struct CachedFrame {
  std::string function;
  std::string file;
  int line = 0;
  bool inlined = false;
};

struct Module {
  std::string key;
  std::shared_ptr<const ElfFile> elf;  // null: the module failed to open
  Dwfl* dwfl = nullptr;                // null: no libdwfl view (names unknown)
  Dwfl_Module* mod = nullptr;
  GElf_Addr bias = 0;
  bool use_dwarf = false;
  DebugSource source = DebugSource::kNone;
  uint64_t inflated = 0;  // what libelf may inflate for it (bound_inflated())
  const char* failure = "";  // why it failed to open (ModuleInfo::failure)
  DebugFiles files;
  // By lookup offset: the inline chain, innermost first, physical last.
  std::unordered_map<uint64_t, std::vector<CachedFrame>> cache;

  explicit Module(std::string k) : key(std::move(k)) {}
  ~Module() {
    if (dwfl != nullptr) dwfl_end(dwfl);
  }
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
};

std::string path_key(const ModuleRef& ref) {
  return "p:" + ref.open_path + '\0' + std::to_string(ref.dev) + ':' + std::to_string(ref.inode);
}

}  // namespace

std::string shared_module_key(const ModuleRef& ref) {
  if (ref.build_id.empty()) return path_key(ref);
  return "b:" + ref.build_id + '\0' + std::to_string(ref.dev) + ':' + std::to_string(ref.inode);
}

namespace {

std::string base_name(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// The name of a subprogram or inlined subroutine: its linkage name
// demangled (qualified, with parameters, as the ELF symbol reads), else
// its DW_AT_name; both through the abstract origin.
std::string die_function_name(Dwarf_Die* die) {
  Dwarf_Attribute attr;
  const char* linkage = dwarf_formstring(dwarf_attr_integrate(die, DW_AT_linkage_name, &attr));
  if (linkage == nullptr)
    linkage = dwarf_formstring(dwarf_attr_integrate(die, DW_AT_MIPS_linkage_name, &attr));
  if (linkage != nullptr) return demangle(linkage);
  const char* name = dwarf_diename(die);
  return name != nullptr ? name : "";
}

// Where an inlined subroutine was called from: DW_AT_call_file (an index
// into its CU's file table) and DW_AT_call_line.
void call_site(Dwarf_Die* cudie, Dwarf_Die* inlined, std::string& file, int& line) {
  Dwarf_Attribute attr;
  Dwarf_Word value = 0;
  if (dwarf_formudata(dwarf_attr(inlined, DW_AT_call_line, &attr), &value) == 0 && value < INT32_MAX)
    line = static_cast<int>(value);
  Dwarf_Files* files = nullptr;
  size_t nfiles = 0;
  if (dwarf_formudata(dwarf_attr(inlined, DW_AT_call_file, &attr), &value) == 0 &&
      dwarf_getsrcfiles(cudie, &files, &nfiles) == 0 && value < nfiles) {
    if (const char* name = dwarf_filesrc(files, value, nullptr, nullptr)) file = name;
  }
}

// Hostile or huge DWARF: the walk below visits at most this many DIEs per
// address (a real CU's top level plus one nesting path is far less).
constexpr size_t kMaxDiesVisited = 1u << 20;

// The subprogram and the inlined subroutines containing `pc`, outermost
// first, found by walking down from `parent` through the DIEs whose ranges
// contain it. Not dwarf_getscopes(): with LTO (Debian's python3.11) the
// abstract origins sit in other CUs, and elfutils 0.188 then returns no
// scope at all, while names need no more than the origin reference.
bool find_pc_chain(Dwarf_Die* parent, Dwarf_Addr pc, std::vector<Dwarf_Die>& chain, size_t& visited,
                   int depth) {
  Dwarf_Die child;
  if (depth > 64 || dwarf_child(parent, &child) != 0) return false;
  do {
    if (++visited > kMaxDiesVisited) return false;
    switch (dwarf_tag(&child)) {
      case DW_TAG_namespace:
      case DW_TAG_module:
        if (find_pc_chain(&child, pc, chain, visited, depth + 1)) return true;
        break;
      case DW_TAG_subprogram:
      case DW_TAG_inlined_subroutine:
      case DW_TAG_entry_point:
      case DW_TAG_lexical_block:
      case DW_TAG_try_block:
      case DW_TAG_catch_block:
        // Ranges nest: the one DIE at this level that contains pc is the
        // only way down.
        if (dwarf_haspc(&child, pc) > 0) {
          const int tag = dwarf_tag(&child);
          if (tag == DW_TAG_subprogram || tag == DW_TAG_inlined_subroutine) chain.push_back(child);
          find_pc_chain(&child, pc, chain, visited, depth + 1);
          return true;
        }
        break;
      default:
        break;
    }
  } while (dwarf_siblingof(&child, &child) == 0);
  return false;
}

}  // namespace

std::string demangle(const std::string& name) {
  // Only Itanium symbol names: __cxa_demangle also accepts bare type
  // encodings, and would turn a C function named "i" into "int".
  if (name.size() < 3 || name.compare(0, 2, "_Z") != 0 || name.size() > kMaxDemangleBytes) {
    return name;
  }
  int status = 0;
  char* out = abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status);
  if (status != 0 || out == nullptr) {
    std::free(out);
    return name;
  }
  std::string result(out);
  std::free(out);
  return result;
}

std::string frame_display_name(const Frame& frame) {
  if (!frame.function.empty()) return frame.function;
  char off[32];
  snprintf(off, sizeof(off), "+0x%" PRIx64, frame.offset);
  const std::string module = base_name(frame.module);
  return (module.empty() ? std::string("[unknown]") : module) + off;
}

struct Symbolizer::Impl {
  SymbolizerLimits limits;
  DebugSearchOptions search;
  SymbolizerStats stats;
  // Most recently used first. Successfully opened modules are keyed by the
  // build-id the caller gave and the file's device and inode
  // (shared_module_key(): shared by every process mapping that file, never
  // by another file that claims the build-id), else by open path and
  // inode. Failures are always keyed by path so that one unreadable
  // /proc/PID/map_files entry cannot poison a build-id.
  std::list<Module> lru;
  std::unordered_map<std::string, std::list<Module>::iterator> index;

  std::list<Module>::iterator find(const ModuleRef& ref) {
    auto it = index.end();
    if (!ref.build_id.empty()) it = index.find(shared_module_key(ref));
    if (it == index.end()) it = index.find(path_key(ref));
    return it == index.end() ? lru.end() : it->second;
  }

  Module& get(const ModuleRef& ref) {
    auto found = find(ref);
    if (found != lru.end()) {
      lru.splice(lru.begin(), lru, found);
      return lru.front();
    }
    while (!lru.empty() && lru.size() >= std::max<size_t>(limits.max_modules, 1)) drop(std::prev(lru.end()));
    Module& m = lru.emplace_front(path_key(ref));
    if (open(ref, m) && !ref.build_id.empty()) m.key = shared_module_key(ref);
    index.emplace(m.key, lru.begin());
    stats.inflated_bytes += m.inflated;
    // The modules together within the bound: the least recently used go.
    while (stats.inflated_bytes > limits.max_inflated_bytes && lru.size() > 1) {
      drop(std::prev(lru.end()));
      ++stats.inflated_evictions;
    }
    return m;
  }

  void drop(std::list<Module>::iterator it) {
    stats.inflated_bytes -= it->inflated;
    index.erase(it->key);
    lru.erase(it);
  }

  void forget(const ModuleRef& ref) {
    auto found = find(ref);
    if (found != lru.end()) drop(found);
  }

  void refuse_inflated(const std::string& path, const char* what, uint64_t declared) {
    ++stats.inflated_refused;
    log_once("symbols.max_inflated_bytes",
             path + ": " + what + " declare " + std::to_string(declared) +
                 " bytes decompressed, over symbols.max_inflated_bytes (" +
                 std::to_string(limits.max_inflated_bytes) + "): not given to libdw; later refusals are "
                 "counted in leakwatch_symbol_inflated_refused_total");
  }

  // Before libdwfl sees the module's files (issue 32): libelf allocates
  // what a compressed section declares, libdw when it opens the DWARF,
  // libdwfl when it reads a symbol table. Symbol tables over the bound: the
  // debug file is dropped, or the object gets no libdwfl view (false).
  // DWARF over it: names only. Sets m.inflated to what may be inflated.
  bool bound_inflated(Module& m) {
    const uint64_t bound = limits.max_inflated_bytes;
    auto sum = [](uint64_t a, uint64_t b) { return b > UINT64_MAX - a ? UINT64_MAX : a + b; };
    const ElfDebugLinks& main = m.elf->debug_links();
    if (main.inflated_symbol_bytes > bound) {
      refuse_inflated(m.elf->path(), "its symbol tables", main.inflated_symbol_bytes);
      return false;
    }
    if (m.files.debug.fd.valid()) {
      const ElfDebugLinks& debug = m.files.debug.elf->debug_links();
      if (sum(main.inflated_symbol_bytes, debug.inflated_symbol_bytes) > bound) {
        refuse_inflated(m.files.debug.path, "its symbol tables", debug.inflated_symbol_bytes);
        m.files = DebugFiles{};
        m.source = main.has_symtab ? DebugSource::kSelf : DebugSource::kNone;
      }
    }
    const bool has_debug = m.files.debug.fd.valid();
    const bool has_alt = m.files.alt.fd.valid();
    const uint64_t symbols =
        sum(main.inflated_symbol_bytes, has_debug ? m.files.debug.elf->debug_links().inflated_symbol_bytes : 0);
    // libdw opens the object's own DWARF first, then the debug file's, and
    // the dwz file's: all may be inflated at once.
    uint64_t dwarf = main.inflated_dwarf_bytes;
    if (has_debug) dwarf = sum(dwarf, m.files.debug.elf->debug_links().inflated_dwarf_bytes);
    if (has_alt) dwarf = sum(dwarf, m.files.alt.elf->debug_links().inflated_dwarf_bytes);
    if (m.use_dwarf && sum(symbols, dwarf) > bound) {
      refuse_inflated(has_debug ? m.files.debug.path : m.elf->path(), "its DWARF sections", dwarf);
      m.use_dwarf = false;
      m.files.alt = DebugFile{};
    }
    m.inflated = sum(symbols, m.use_dwarf ? dwarf : 0);
    return true;
  }

  // The module's file: the mapping the caller named, else its path in the
  // target's root, else its path in the daemon's root: the target exited
  // before we got to it, and its map_files and root went with it. That last
  // file is used only when it is provably the object the target mapped:
  // the same device and inode, and the build-id captured while it lived
  // (checked in open()); a build-id alone would let anyone's file with a
  // copied build-id name a victim's frames (decision file-identity).
  // `failure` says why not.
  Result<int> open_main(const ModuleRef& ref, std::string& opened_path, const char*& failure) {
    Result<int> fd = open_untrusted_file(ref.open_path);
    opened_path = ref.open_path;
    if (!fd && !ref.root.empty() && !ref.path.empty() && ref.path[0] == '/') {
      opened_path = ref.root + ref.path;
      fd = open_in_root(ref.root, ref.path);
    }
    failure = kSymbolsFileGone;
    if (fd || ref.path.empty() || ref.path[0] != '/' || (ref.build_id.empty() && ref.inode == 0)) return fd;
    opened_path = ref.path;
    fd = open_untrusted_file(ref.path);
    struct stat st;
    if (fd && (fstat(*fd, &st) != 0 || st.st_ino != ref.inode || st.st_dev != ref.dev)) {
      close(*fd);
      failure = kSymbolsFileReplaced;
      return Error{ESTALE, ref.path + ": not the file the process mapped"};
    }
    return fd;
  }

  // Fills `m`; false (and one error counted) when the module is unusable.
  bool open(const ModuleRef& ref, Module& m) {
    std::string opened_path;
    Result<int> opened = open_main(ref, opened_path, m.failure);
    struct stat st;
    if (!opened || fstat(*opened, &st) != 0) {
      if (opened) close(*opened);
      ++stats.module_errors;
      return false;
    }
    Fd fd(*opened);
    m.failure = kSymbolsUnreadable;
    auto elf = ElfFile::open_fd(fd.get(), opened_path, ElfOpenOptions{.index_symbols = false});
    if (!elf.ok()) {
      ++stats.module_errors;
      return false;
    }
    // A build-id mismatch (or none where the mapped object had one) means
    // the file at this path is not the object the caller saw mapped
    // (replaced on disk): its symbols would be wrong.
    if (!ref.build_id.empty() && elf.value()->build_id() != ref.build_id) {
      m.failure = kSymbolsFileReplaced;
      ++stats.module_errors;
      return false;
    }
    m.failure = "";
    m.elf = std::move(elf).value();
    m.use_dwarf = static_cast<uint64_t>(st.st_size) <= limits.max_file_bytes;
    find_debug_files(ref, m);
    if (!bound_inflated(m)) {
      ++stats.modules_opened;
      ++stats.modules_no_debug_info;
      return true;
    }
    // .gnu_debugdata that we could not (or would not) decompress must not
    // reach libdwfl, which decompresses it without a bound when it finds no
    // other .symtab: no libdwfl view, names unknown.
    const ElfDebugLinks& links = m.elf->debug_links();
    const bool debug_has_symtab =
        m.files.debug.fd.valid() && m.files.debug.elf->debug_links().has_symtab;
    if (links.debugdata_size > 0 && !links.has_symtab && !debug_has_symtab) {
      ++stats.modules_opened;
      ++stats.modules_no_debug_info;
      return true;
    }

    m.dwfl = dwfl_begin(&kCallbacks);
    if (m.dwfl == nullptr) {
      ++stats.module_errors;
      return false;
    }
    // Base 0: module addresses are the file's own vaddrs plus the bias that
    // libdwfl reports, independent of where any process mapped it.
    const int dwfl_fd = fd.release();
    m.mod = dwfl_report_elf(m.dwfl, ref.path.c_str(), opened_path.c_str(), dwfl_fd, 0, false);
    if (m.mod == nullptr) {
      close(dwfl_fd);  // consumed only on success
      ++stats.module_errors;
      return false;
    }
    dwfl_report_end(m.dwfl, nullptr, nullptr);
    void** userdata = nullptr;
    dwfl_module_info(m.mod, &userdata, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr);
    if (userdata != nullptr) *userdata = &m.files;
    if (dwfl_module_getelf(m.mod, &m.bias) == nullptr) {
      m.mod = nullptr;
      ++stats.module_errors;
      return false;
    }
    ++stats.modules_opened;
    switch (m.source) {
      case DebugSource::kSelf: ++stats.modules_self; break;
      case DebugSource::kBuildIdDir: ++stats.modules_build_id_dir; break;
      case DebugSource::kDebugLink: ++stats.modules_debuglink; break;
      case DebugSource::kDebugData: ++stats.modules_debugdata; break;
      case DebugSource::kDebuginfod: ++stats.modules_debuginfod; break;
      case DebugSource::kNone: ++stats.modules_no_debug_info; break;
    }
    return true;
  }

  // Sets m.files and m.source (docs/architecture.md, "Symbolization").
  void find_debug_files(const ModuleRef& ref, Module& m) {
    const ElfDebugLinks& links = m.elf->debug_links();
    if (links.has_symtab && links.has_debug_info) {
      m.source = DebugSource::kSelf;
    } else {
      // A file too large for DWARF gets names only: no separate debug file.
      DebugSearchOptions search_here = search;
      if (!m.use_dwarf) {
        search_here.debug_dirs.clear();
        search_here.debuginfod_cache_dir.clear();
      }
      DebugFileQuery q;
      q.object_path = ref.path;
      q.build_id = m.elf->build_id();
      q.debuglink = m.use_dwarf ? links.debuglink : std::string();
      q.debuglink_crc = links.debuglink_crc;
      q.target_root = ref.root;
      if (auto f = find_debug_file(q, search_here, &stats.lookups)) {
        // A debug file without a .symtab would send libdwfl to the
        // object's .gnu_debugdata (see open()): MiniDebugInfo instead.
        if (links.debugdata_size == 0 || links.has_symtab || f->elf->debug_links().has_symtab) {
          m.files.debug = std::move(*f);
          m.source = m.files.debug.source;
        }
      }
      if (!m.files.debug.fd.valid() && links.debugdata_size > 0 && !links.has_symtab) {
        if (auto f = extract_debugdata(*m.elf, search, &stats.lookups)) {
          m.files.debug = std::move(*f);
          m.source = DebugSource::kDebugData;
        }
      }
      if (!m.files.debug.fd.valid() && links.has_symtab) m.source = DebugSource::kSelf;
    }
    // dwz: the DWARF in use names a shared file with the rest of it.
    const ElfDebugLinks& dwarf_links =
        m.files.debug.fd.valid() ? m.files.debug.elf->debug_links() : links;
    if (m.use_dwarf && !dwarf_links.altlink.empty()) {
      if (auto f = find_alt_file(dwarf_links.altlink, dwarf_links.altlink_build_id,
                                 m.files.debug.fd.valid() ? m.files.debug.path : ref.path, ref.root,
                                 search, &stats.lookups)) {
        m.files.alt = std::move(*f);
        m.files.altlink = dwarf_links.altlink;
      }
    }
  }

  std::vector<CachedFrame> resolve(const Module& m, uint64_t lookup_offset) const {
    std::vector<CachedFrame> out(1);
    std::optional<uint64_t> vaddr = m.elf->offset_to_vaddr(lookup_offset);
    if (!vaddr || m.mod == nullptr) return out;
    const GElf_Addr addr = *vaddr + m.bias;
    GElf_Off sym_offset = 0;
    GElf_Sym sym;
    const char* name =
        dwfl_module_addrinfo(m.mod, addr, &sym_offset, &sym, nullptr, nullptr, nullptr);
    CachedFrame physical;
    if (name != nullptr) physical.function = demangle(name);
    if (!m.use_dwarf) {
      out[0] = std::move(physical);
      return out;
    }
    // The line of the address itself belongs to the innermost frame.
    std::string leaf_file;
    int leaf_line = 0;
    if (Dwfl_Line* line = dwfl_module_getsrc(m.mod, addr)) {
      const char* src = dwfl_lineinfo(line, nullptr, &leaf_line, nullptr, nullptr, nullptr);
      if (src != nullptr) leaf_file = src;
      else leaf_line = 0;
    }
    out.clear();
    Dwarf_Addr cu_bias = 0;
    Dwarf_Die* cudie = dwfl_module_addrdie(m.mod, addr, &cu_bias);
    std::vector<Dwarf_Die> chain;  // outermost first
    size_t visited = 0;
    if (cudie != nullptr) find_pc_chain(cudie, addr - cu_bias, chain, visited, 0);
    // Each inlined subroutine is a frame, innermost first; its call site is
    // the line of the frame outside it.
    std::string file = leaf_file;
    int line = leaf_line;
    for (size_t i = chain.size(); i-- > 0 && out.size() < kMaxInlineDepth;) {
      if (dwarf_tag(&chain[i]) != DW_TAG_inlined_subroutine) {
        if (physical.function.empty()) physical.function = die_function_name(&chain[i]);
        break;
      }
      CachedFrame f;
      f.function = die_function_name(&chain[i]);
      f.file = file;
      f.line = line;
      f.inlined = true;
      out.push_back(std::move(f));
      file.clear();
      line = 0;
      call_site(cudie, &chain[i], file, line);
    }
    physical.file = file;
    physical.line = line;
    out.push_back(std::move(physical));
    return out;
  }

  const std::vector<CachedFrame>& lookup(Module& m, uint64_t lookup_offset) {
    auto it = m.cache.find(lookup_offset);
    if (it == m.cache.end()) {
      if (m.cache.size() >= std::max<size_t>(limits.max_cached_addresses_per_module, 1)) {
        m.cache.clear();
      }
      it = m.cache.emplace(lookup_offset, resolve(m, lookup_offset)).first;
    }
    return it->second;
  }
};

Symbolizer::Symbolizer(SymbolizerLimits limits, DebugSearchOptions search)
    : impl_(std::make_unique<Impl>()) {
  impl_->limits = limits;
  impl_->search = std::move(search);
}

Symbolizer::~Symbolizer() = default;

uint64_t Symbolizer::errors() const { return impl_->stats.module_errors; }

SymbolizerStats Symbolizer::stats() const { return impl_->stats; }

std::vector<Frame> Symbolizer::symbolize_inline(const ModuleRef& module, uint64_t file_offset) {
  Frame base;
  base.module = module.path;
  base.offset = file_offset;
  Module& m = impl_->get(module);
  base.build_id = !module.build_id.empty() ? module.build_id
                  : m.elf                  ? m.elf->build_id()
                                           : std::string();
  if (!m.elf) return {base};

  // A return address points after the call; offset-1 is inside the call
  // instruction, so the caller's line (not the next statement) is found.
  // No function there, so no call either: the address is where a function
  // begins, e.g. glibc's __restore_rt, "returned to" by a signal handler
  // and preceded by padding that no symbol covers: look up the address.
  const std::vector<CachedFrame>* cached = &impl_->lookup(m, file_offset > 0 ? file_offset - 1 : 0);
  auto named = [](const std::vector<CachedFrame>& c) {
    for (const CachedFrame& f : c)
      if (!f.function.empty()) return true;
    return false;
  };
  if (!named(*cached) && file_offset > 0) cached = &impl_->lookup(m, file_offset);
  std::vector<Frame> out;
  out.reserve(cached->size());
  for (const CachedFrame& c : *cached) {
    Frame f = base;
    f.function = c.function;
    f.file = c.file;
    f.line = c.line;
    f.inlined = c.inlined;
    out.push_back(std::move(f));
  }
  if (out.empty()) out.push_back(base);
  return out;
}

Frame Symbolizer::symbolize(const ModuleRef& module, uint64_t file_offset) {
  return symbolize_inline(module, file_offset).back();
}

Symbolizer::ModuleInfo Symbolizer::module_info(const ModuleRef& module) {
  Module& m = impl_->get(module);
  ModuleInfo info;
  info.failure = m.failure;
  if (!m.elf) return info;
  info.opened = true;
  info.build_id = m.elf->build_id();
  info.source = m.source;
  const bool debug_dwarf =
      m.files.debug.fd.valid() && m.files.debug.elf->debug_links().has_debug_info;
  info.has_dwarf = m.use_dwarf && m.mod != nullptr && (m.elf->debug_links().has_debug_info || debug_dwarf);
  info.wants_debug_file = m.use_dwarf && !info.has_dwarf;
  return info;
}

void Symbolizer::forget(const ModuleRef& module) { impl_->forget(module); }

}  // namespace lw
