// SPDX-License-Identifier: Apache-2.0
#include "engine/python_process.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>

#include "core/symbols/elf_file.h"
#include "core/platform/fd.h"
#include "core/proc/procfs.h"
#include "core/symbols/stack_frames.h"

namespace lw {

bool ProcessMemory::read(uint64_t addr, void* out, size_t len) {
  if (len == 0) return true;
  if (len > (1u << 20) || addr + len < addr) return false;
  iovec local{out, len};
  iovec remote{reinterpret_cast<void*>(addr), len};
  ssize_t n = process_vm_readv(pid_, &local, 1, &remote, 1, 0);
  return n == static_cast<ssize_t>(len);
}

namespace {

std::string version_string(uint32_t hex) {
  char buf[32];
  snprintf(buf, sizeof(buf), "%u.%u.%u", hex >> 24, (hex >> 16) & 0xff, (hex >> 8) & 0xff);
  return buf;
}

// The lowest mapping of object (dev, ino): where its file offset 0 is.
const MapEntry* first_mapping(const ParsedMaps& maps, uint32_t dev, uint64_t ino) {
  const MapEntry* best = nullptr;
  for (const MapEntry& m : maps.entries)
    if (m.inode == ino && kernel_dev(m.dev_major, m.dev_minor) == dev && (!best || m.offset < best->offset))
      best = &m;
  return best;
}

}  // namespace

void PythonProcess::refresh(BpfSession& session, const ParsedMaps& maps) {
  if (!status_.present) {
    // The executable, whatever its name (an embedding or frozen program),
    // and every library whose name says python (libpython3.11.so.1.0):
    // opening every object (libtorch_cpu's half a million symbols) to look
    // for _PyRuntime would cost more than the rest of the attach. What
    // they are, and their version, comes from the binary.
    struct stat exe {};
    const bool have_exe = stat(("/proc/" + std::to_string(pid_) + "/exe").c_str(), &exe) == 0;
    for (const MapEntry& m : maps.entries) {
      if (!m.is_file() || !m.executable) continue;
      const auto key = std::make_tuple(kernel_dev(m.dev_major, m.dev_minor), m.inode);
      if (!seen_.insert(key).second) continue;
      const std::string base = m.path.substr(m.path.rfind('/') + 1);
      const bool is_exe = have_exe && exe.st_ino == m.inode &&
                          major(exe.st_dev) == m.dev_major && minor(exe.st_dev) == m.dev_minor;
      if (!is_exe && base.find("python") == std::string::npos) continue;
      Result<int> fd = open_mapped_file(pid_, m);
      if (!fd) continue;
      Fd owned(*fd);
      auto elf = ElfFile::open_fd(owned.get(), m.path);
      if (!elf) continue;
      PythonBinary b = detect_python(**elf);
      if (!b.is_python) continue;
      status_.present = true;
      status_.object = m.path;
      dev_ = std::get<0>(key);
      ino_ = m.inode;
      if (b.version == 0) {
        status_.version = "<3.11";
        status_.support = "unsupported";
        status_.reason = "CPython older than 3.11 (no Py_Version): its frames have another layout; "
                         "Python frames are read for 3.11 to 3.13";
        break;
      }
      status_.version = version_string(b.version_hex);
      status_.support = python_support_name(b.version);
      layout_ = python_layout(b.version);
      if (!layout_) {
        status_.reason = "CPython " + python_version_name(b.version) +
                         " has no offset table: Python frames are read for 3.11 to 3.13";
        break;
      }
      // Runtime addresses: the load bias from the object's first mapping.
      const MapEntry* first = first_mapping(maps, dev_, ino_);
      uint64_t lowest_vaddr = ~0ull;
      for (const ElfSegment& s : (*elf)->segments()) lowest_vaddr = std::min<uint64_t>(lowest_vaddr, s.vaddr & ~0xfffull);
      if (!first || first->offset != 0 || lowest_vaddr == ~0ull) {
        status_.reason = "the interpreter's first mapping was not found";
        layout_ = nullptr;
        break;
      }
      const uint64_t bias = (*elf)->is_exec() ? 0 : first->start - lowest_vaddr;
      runtime_addr_ = b.runtime_vaddr + bias;
      code_type_addr_ = b.code_type_vaddr ? b.code_type_vaddr + bias : 0;
      if (b.eval_vaddr) {
        if (auto off = (*elf)->vaddr_to_offset(b.eval_vaddr)) {
          eval_start_ = *off;
          eval_end_ = *off + b.eval_size;
        }
      }
      status_.reason = "glibc's pthread_getspecific not found yet";
      break;
    }
  }
  if (layout_ && !status_.frames) {
    if (!tsd_key0_) find_tsd_offset(maps);
    if (tsd_key0_) try_register(session);
  }
}

void PythonProcess::find_tsd_offset(const ParsedMaps& maps) {
  // glibc's pthread_getspecific (libc.so.6 since 2.34, libpthread before).
  std::set<std::tuple<uint32_t, uint64_t>> tried;
  for (const MapEntry& m : maps.entries) {
    if (!m.is_file() || !m.executable) continue;
    const std::string base = m.path.substr(m.path.rfind('/') + 1);
    if (base.rfind("libc.so", 0) != 0 && base.rfind("libc-", 0) != 0 && base.rfind("libpthread", 0) != 0)
      continue;
    if (!tried.insert({kernel_dev(m.dev_major, m.dev_minor), m.inode}).second) continue;
    Result<int> fd = open_mapped_file(pid_, m);
    if (!fd) continue;
    Fd owned(*fd);
    auto elf = ElfFile::open_fd(owned.get(), m.path);
    if (!elf) continue;
    auto fn = (*elf)->find_exported_function("pthread_getspecific");
    if (!fn) continue;
    std::vector<uint8_t> code = (*elf)->read_at_vaddr(fn->vaddr, 32);
    if (auto off = glibc_tsd_offset(code)) {
      tsd_key0_ = *off;
      return;
    }
  }
  status_.reason = "pthread_getspecific not recognized (not glibc?): the thread state cannot be found";
}

void PythonProcess::try_register(BpfSession& session) {
  // The BPF side reads the autoTSSkey itself at each allocation, so the
  // process is registered at once, before its interpreter has started.
  lw_py_proc proc = make_py_proc(*layout_, tsd_key0_, runtime_addr_);
  // Where the native walk stops (decision python-frames, "Where the native
  // walk stops"): unknown (0) when the symbol was not found.
  if (eval_end_ > eval_start_ && eval_end_ <= UINT32_MAX) {
    proc.eval_ino = ino_;
    proc.eval_dev = dev_;
    proc.eval_start = static_cast<uint32_t>(eval_start_);
    proc.eval_end = static_cast<uint32_t>(eval_end_);
  }
  if (Status st = session.set_python_process(pid_, proc); !st) {
    status_.reason = st.error().message;
    return;
  }
  status_.frames = true;
  status_.reason.clear();
  // What the key is now, for the reason shown (best effort: the process
  // may not have made it yet, and BPF looks again at every allocation).
  uint32_t tss[2] = {0, 0};
  if (memory_.read(runtime_addr_ + layout_->runtime_autotss, tss, sizeof(tss)) && tss[0] == 1 && tss[1] >= 32)
    status_.reason = "the thread-state key is >= 32 (kept outside struct pthread): frames are not read";
}

void PythonProcess::reset(BpfSession& session) {
  (void)session.remove_python_process(pid_);
  status_ = PythonInfo{};
  seen_.clear();
  layout_ = nullptr;
  dev_ = 0;
  ino_ = 0;
  eval_start_ = eval_end_ = 0;
  runtime_addr_ = code_type_addr_ = 0;
  tsd_key0_ = 0;
  cache_ = PythonCodeCache();
}

bool PythonProcess::is_eval_frame(uint32_t dev, uint64_t ino, uint64_t offset) const {
  // A return address may be the byte after the function's last call.
  return layout_ && eval_end_ > eval_start_ && dev == dev_ && ino == ino_ && offset > eval_start_ &&
         offset <= eval_end_;
}

std::vector<Frame> PythonProcess::resolve(const std::vector<lw_py_frame>& py, std::vector<bool>& entry) {
  std::vector<Frame> out;
  entry.clear();
  if (!layout_) return out;
  out.reserve(py.size());
  for (const lw_py_frame& f : py) {
    out.push_back(cache_.frame(memory_, *layout_, f.code, code_type_addr_, f.sig, f.lasti));
    entry.push_back((f.flags & LW_PYF_ENTRY) != 0);
  }
  // Charged to the process (issue 32): what its code objects cost us.
  status_.code_cache_bytes = cache_.bytes();
  status_.line_table_bytes_read = cache_.line_table_bytes_read();
  return out;
}

}  // namespace lw
