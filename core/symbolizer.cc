// SPDX-License-Identifier: Apache-2.0
#include "core/symbolizer.h"

#include <cxxabi.h>
#include <elfutils/libdwfl.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <list>
#include <optional>
#include <unordered_map>

#include "core/elf_file.h"
#include "core/fd.h"

namespace lw {

namespace {

// The demangler recurses on the input; very long (hostile) names are
// returned as they are rather than handed to it.
constexpr size_t kMaxDemangleBytes = 8192;

// nullptr selects libdwfl's default search path, which includes
// /usr/lib/debug (so .build-id/xx/yyyy.debug and .gnu_debuglink targets).
char* g_debuginfo_path = nullptr;

const Dwfl_Callbacks kWithDebuginfo = {
    .find_elf = dwfl_build_id_find_elf,
    .find_debuginfo = dwfl_standard_find_debuginfo,
    .section_address = dwfl_offline_section_address,
    .debuginfo_path = &g_debuginfo_path,
};

int no_debuginfo(Dwfl_Module*, void**, const char*, Dwarf_Addr, const char*, const char*,
                 GElf_Word, char**) {
  return -1;
}

// For files over max_file_bytes: symbol tables of the file itself, no
// separate debug file.
const Dwfl_Callbacks kSymbolsOnly = {
    .find_elf = dwfl_build_id_find_elf,
    .find_debuginfo = no_debuginfo,
    .section_address = dwfl_offline_section_address,
    .debuginfo_path = &g_debuginfo_path,
};

struct CachedFrame {
  std::string function;
  std::string file;
  int line = 0;
};

struct Module {
  std::string key;
  std::shared_ptr<const ElfFile> elf;  // null: the module failed to open
  Dwfl* dwfl = nullptr;                // null: no libdwfl view (names unknown)
  Dwfl_Module* mod = nullptr;
  GElf_Addr bias = 0;
  bool use_dwarf = false;
  std::unordered_map<uint64_t, CachedFrame> cache;  // by lookup offset

  explicit Module(std::string k) : key(std::move(k)) {}
  ~Module() {
    if (dwfl != nullptr) dwfl_end(dwfl);
  }
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
};

std::string path_key(const ModuleRef& ref) {
  return "p:" + ref.open_path + '\0' + std::to_string(ref.inode);
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

struct Symbolizer::Impl {
  SymbolizerLimits limits;
  uint64_t errors = 0;
  // Most recently used first. Successfully opened modules are keyed by the
  // build-id the caller gave (shared by every process mapping the object),
  // else by open path and inode. Failures are always keyed by path so that
  // one unreadable /proc/PID/map_files entry cannot poison a build-id.
  std::list<Module> lru;
  std::unordered_map<std::string, std::list<Module>::iterator> index;

  Module& get(const ModuleRef& ref) {
    const std::string pkey = path_key(ref);
    auto it = index.end();
    if (!ref.build_id.empty()) it = index.find("b:" + ref.build_id);
    if (it == index.end()) it = index.find(pkey);
    if (it != index.end()) {
      lru.splice(lru.begin(), lru, it->second);
      return lru.front();
    }
    while (!lru.empty() && lru.size() >= std::max<size_t>(limits.max_modules, 1)) {
      index.erase(lru.back().key);
      lru.pop_back();
    }
    Module& m = lru.emplace_front(pkey);
    if (open(ref, m) && !ref.build_id.empty()) m.key = "b:" + ref.build_id;
    index.emplace(m.key, lru.begin());
    return m;
  }

  // Fills `m`; false (and one error counted) when the module is unusable.
  bool open(const ModuleRef& ref, Module& m) {
    // Regular files only; a /proc/PID/root/... path resolves inside that root.
    Result<int> opened = open_untrusted_file(ref.open_path);
    struct stat st;
    if (!opened || fstat(*opened, &st) != 0) {
      if (opened) close(*opened);
      ++errors;
      return false;
    }
    const int fd = *opened;
    auto elf = ElfFile::open_fd(fd, ref.open_path);
    // A build-id mismatch means the file at this path is not the object the
    // caller saw mapped (replaced on disk); its symbols would be wrong.
    if (!elf.ok() || (!ref.build_id.empty() && !elf.value()->build_id().empty() &&
                      elf.value()->build_id() != ref.build_id)) {
      close(fd);
      ++errors;
      return false;
    }
    m.elf = std::move(elf).value();

    m.use_dwarf = static_cast<uint64_t>(st.st_size) <= limits.max_file_bytes;
    m.dwfl = dwfl_begin(m.use_dwarf ? &kWithDebuginfo : &kSymbolsOnly);
    if (m.dwfl == nullptr) {
      close(fd);
      ++errors;
      return false;
    }
    // Base 0: module addresses are the file's own vaddrs plus the bias that
    // libdwfl reports, independent of where any process mapped it.
    m.mod = dwfl_report_elf(m.dwfl, ref.path.c_str(), ref.open_path.c_str(), fd, 0, false);
    if (m.mod == nullptr) {
      close(fd);  // consumed only on success
      ++errors;
      return false;
    }
    dwfl_report_end(m.dwfl, nullptr, nullptr);
    if (dwfl_module_getelf(m.mod, &m.bias) == nullptr) {
      m.mod = nullptr;
      ++errors;
      return false;
    }
    return true;
  }

  CachedFrame resolve(const Module& m, uint64_t lookup_offset) const {
    CachedFrame out;
    std::optional<uint64_t> vaddr = m.elf->offset_to_vaddr(lookup_offset);
    if (!vaddr || m.mod == nullptr) return out;
    const GElf_Addr addr = *vaddr + m.bias;
    GElf_Off sym_offset = 0;
    GElf_Sym sym;
    const char* name =
        dwfl_module_addrinfo(m.mod, addr, &sym_offset, &sym, nullptr, nullptr, nullptr);
    if (name != nullptr) out.function = demangle(name);
    if (m.use_dwarf) {
      if (Dwfl_Line* line = dwfl_module_getsrc(m.mod, addr)) {
        int lineno = 0;
        const char* src = dwfl_lineinfo(line, nullptr, &lineno, nullptr, nullptr, nullptr);
        if (src != nullptr) {
          out.file = src;
          out.line = lineno;
        }
      }
    }
    return out;
  }
};

Symbolizer::Symbolizer(SymbolizerLimits limits) : impl_(std::make_unique<Impl>()) {
  impl_->limits = limits;
}

Symbolizer::~Symbolizer() = default;

uint64_t Symbolizer::errors() const { return impl_->errors; }

Frame Symbolizer::symbolize(const ModuleRef& module, uint64_t file_offset) {
  Frame frame;
  frame.module = module.path;
  frame.offset = file_offset;
  Module& m = impl_->get(module);
  frame.build_id = !module.build_id.empty() ? module.build_id
                   : m.elf                  ? m.elf->build_id()
                                            : std::string();
  if (!m.elf) return frame;

  auto resolve = [&](uint64_t lookup) {
    auto it = m.cache.find(lookup);
    if (it == m.cache.end()) {
      if (m.cache.size() >= std::max<size_t>(impl_->limits.max_cached_addresses_per_module, 1)) {
        m.cache.clear();
      }
      it = m.cache.emplace(lookup, impl_->resolve(m, lookup)).first;
    }
    frame.function = it->second.function;
    frame.file = it->second.file;
    frame.line = it->second.line;
  };
  // A return address points after the call; offset-1 is inside the call
  // instruction, so the caller's line (not the next statement) is found.
  resolve(file_offset > 0 ? file_offset - 1 : 0);
  // No function before it, so no call either: the address is where a
  // function begins, e.g. glibc's __restore_rt, "returned to" by a signal
  // handler and preceded by padding that no symbol covers.
  if (frame.function.empty() && file_offset > 0) resolve(file_offset);
  return frame;
}

}  // namespace lw
