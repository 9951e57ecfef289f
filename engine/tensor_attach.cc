// SPDX-License-Identifier: Apache-2.0
// The tensor tier's part of ProcessAttacher (decision tensor-tier): finds
// the framework libraries a process maps (libc10.so, libc10_cuda.so,
// libtensorflow_framework.so*), plans their allocators' probes from the
// exported names (core/probes/tensor_probes.h) and attaches them. Optional
// like CUDA's: a library without the functions, or with another signature,
// gets no probe and a reason, never the process's failure.
#include <sys/sysmacros.h>

#include <algorithm>

#include "core/platform/fd.h"
#include "core/platform/log.h"
#include "core/probes/tensor_probes.h"
#include "core/proc/procfs.h"
#include "engine/process_attacher.h"

namespace lw {

namespace {

// AttachedObject roles of the tier: the CPU pair (or BFC), the memory-report
// hook, the caching allocator's USDTs. Each is attached once per object.
constexpr char kRoleTensor[] = "tensor";
constexpr char kRoleTensorHook[] = "tensor:hook";
constexpr char kRoleTensorUsdt[] = "tensor:usdt";

// .note.stapsdt is small (one note per probe site); a larger one is not read.
constexpr uint64_t kMaxNoteBytes = 1 << 20;

bool has_torch_usdts(const ElfFile& elf) {
  Result<ElfSectionData> notes = elf.read_section(".note.stapsdt", kMaxNoteBytes);
  if (!notes) return false;
  const std::vector<uint8_t>& b = notes->bytes;
  return has_usdt_note(b.data(), b.size(), "pytorch", "malloc") &&
         has_usdt_note(b.data(), b.size(), "pytorch", "free");
}

}  // namespace

bool is_tensor_role(const std::string& role) { return role.rfind(kRoleTensor, 0) == 0; }

bool ProcessAttacher::torch_usdts_attached(const MapEntry& m) const {
  const uint64_t dev = makedev(m.dev_major, m.dev_minor);
  return std::any_of(objects_.begin(), objects_.end(), [&](const AttachedObject& o) {
    return o.inode == m.inode && o.dev == dev && o.role == kRoleTensorUsdt && !o.probes.empty() &&
           o.probes[0].attached;
  });
}

bool ProcessAttacher::tensor_object_known(const MapEntry& m, const char* role) const {
  const uint64_t dev = makedev(m.dev_major, m.dev_minor);
  return std::any_of(objects_.begin(), objects_.end(), [&](const AttachedObject& o) {
    return o.inode == m.inode && o.dev == dev && o.role == role;
  });
}

void ProcessAttacher::attach_torch_usdts(const MapEntry& m, const ElfFile& elf) {
  AttachedObject obj;
  obj.path = m.path;
  obj.dev = makedev(m.dev_major, m.dev_minor);
  obj.inode = m.inode;
  obj.build_id = elf.build_id();
  obj.role = kRoleTensorUsdt;
  Result<int> fd_or = open_mapped_file(pid_, m);
  std::string error = fd_or ? "" : fd_or.error().message;
  Fd fd(fd_or ? *fd_or : -1);
  const std::string fd_path = "/proc/self/fd/" + std::to_string(fd.get());
  for (const char* name : {"malloc", "free"}) {
    ProbeReport r;
    r.symbols = std::string("pytorch:") + name;
    r.placement = "USDT (its semaphore raised while attached)";
    if (error.empty()) {
      Result<Link> link = session_.attach_usdt(pid_, fd_path, "pytorch", name);
      if (link) {
        obj.links.push_back(std::move(*link));
        r.attached = true;
      } else {
        r.error = link.error().message;
      }
    } else {
      r.error = error;
    }
    obj.probes.push_back(std::move(r));
  }
  if (!obj.probes[0].attached || !obj.probes[1].attached) {
    // Both or neither: a malloc without its free would only grow.
    destroy_links(std::move(obj.links));
    obj.links.clear();
    for (ProbeReport& r : obj.probes) {
      if (r.attached) r.error = "its pair failed to attach";
      r.attached = false;
    }
    tensor_refusals_.push_back(m.path + ": USDTs not attached (the memory-report hook records the tensors instead): " +
                               (obj.probes[0].error.empty() ? obj.probes[1].error : obj.probes[0].error));
  }
  objects_.push_back(std::move(obj));
}

void ProcessAttacher::attach_tensor_objects(const ObjectScan& scan) {
  // Which libraries are mapped decides the hook: it is placed only with a
  // CUDA caching allocator, and only for the totals when its USDTs record.
  std::optional<size_t> c10_cuda;
  for (size_t i = 0; i < scan.objects.size(); ++i)
    if (scan.objects[i].elf && tensor_library(scan.objects[i].path) == TensorLibrary::kC10Cuda) c10_cuda = i;
  bool usdts = c10_cuda && has_torch_usdts(*scan.objects[*c10_cuda].elf);
  if (c10_cuda && usdts && !tensor_object_known(scan.entries[*c10_cuda], kRoleTensorUsdt))
    attach_torch_usdts(scan.entries[*c10_cuda], *scan.objects[*c10_cuda].elf);
  // USDTs that would not attach (a perf-event uprobe refused where the
  // daemon's uprobe_multi links are not): the hook records the tensors.
  if (usdts) usdts = torch_usdts_attached(scan.entries[*c10_cuda]);
  for (size_t i = 0; i < scan.objects.size(); ++i) {
    const ElfFile* elf = scan.objects[i].elf.get();
    const TensorLibrary lib = elf ? tensor_library(scan.objects[i].path) : TensorLibrary::kNone;
    if (lib != TensorLibrary::kC10 && lib != TensorLibrary::kTensorFlow) continue;
    const MapEntry& m = scan.entries[i];
    const std::vector<std::string> exports = elf->exported_functions_with_prefix(tensor_symbol_prefixes(lib));
    const TensorLibraryPlan plan = plan_tensor_library(lib, exports, c10_cuda.has_value(), usdts);
    // The pair and the hook are separate objects: the hook may come later,
    // when libc10_cuda is loaded after libc10.
    for (const bool hook : {false, true}) {
      const char* role = hook ? kRoleTensorHook : kRoleTensor;
      if (tensor_object_known(m, role)) continue;
      std::vector<PlannedProbe> planned;
      for (const TensorProbe& p : plan.probes) {
        const bool is_hook = p.func == LW_FUNC_TORCH_REPORT || p.func == LW_FUNC_TORCH_REPORT_SHORT ||
                             p.func == LW_FUNC_TORCH_REPORT_TOTALS;
        if (is_hook != hook) continue;
        std::optional<ElfSymbol> sym = elf->find_exported_function(p.mangled);
        if (!sym) continue;
        PlannedProbe pp;
        pp.object = i;
        pp.role = role;
        pp.spec = ProbeSpec{p.mangled, p.func, p.needs_return, false, false};
        pp.symbol = *sym;
        planned.push_back(std::move(pp));
      }
      if (planned.empty()) continue;
      std::vector<const PlannedProbe*> probes;
      for (const PlannedProbe& p : planned) probes.push_back(&p);
      if (Status st = attach_object(m, *elf, probes, /*keep_on_failure=*/true); !st)
        tensor_refusals_.push_back(st.error().message);
    }
    for (const std::string& r : plan.refusals)
      if (std::find(tensor_refusals_.begin(), tensor_refusals_.end(), m.path + ": " + r) ==
          tensor_refusals_.end())
        tensor_refusals_.push_back(m.path + ": " + r);
  }
  refresh_tensor_info(scan);
}

void ProcessAttacher::refresh_tensor_info(const ObjectScan& scan) {
  TensorTierInfo info;
  bool mapped = false, pytorch_cuda = false, tensorflow = false;
  for (const LoadedObject& o : scan.objects) {
    const TensorLibrary lib = tensor_library(o.path);
    mapped = mapped || lib != TensorLibrary::kNone;
    pytorch_cuda = pytorch_cuda || lib == TensorLibrary::kC10Cuda;
    tensorflow = tensorflow || lib == TensorLibrary::kTensorFlow;
  }
  for (const AttachedObject& o : objects_) {
    if (!is_tensor_role(o.role)) continue;
    for (const ProbeReport& r : o.probes) {
      if (!r.attached) continue;
      const char* source = o.role == std::string(kRoleTensorUsdt) ? kSourcePytorchCudaUsdt
                           : o.role == std::string(kRoleTensorHook)
                               ? kSourcePytorchCudaHook
                               : (r.symbols.find("BFCAllocator") != std::string::npos ? kSourceTensorflowBfc
                                                                                       : kSourcePytorchCpu);
      if (std::find(info.sources.begin(), info.sources.end(), source) == info.sources.end())
        info.sources.push_back(source);
    }
  }
  info.state = !mapped ? "none" : info.sources.empty() ? "unsupported" : "on";
  for (const std::string& r : tensor_refusals_)
    info.reason += (info.reason.empty() ? "" : "; ") + r;
  if (info.state == "unsupported") info.reason = "unsupported: " + info.reason;
  if (pytorch_cuda || tensorflow)
    info.gpu_allocator = gpu_allocator_path(
        read_bounded("/proc/" + std::to_string(pid_) + "/environ", kMaxEnvironBytes), pytorch_cuda,
        tensorflow);
  tensor_info_ = std::move(info);
}

}  // namespace lw
