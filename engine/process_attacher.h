/* SPDX-License-Identifier: Apache-2.0 */
// Attaches the allocator probes to one process: reads its mapped objects
// from /proc/PID/maps (a container has its own), decides which object's
// malloc, free, operator new... calls reach, the way the dynamic linker does
// (core/probes/allocator_resolver.h: executable, LD_PRELOAD from the
// process's environment, /etc/ld.so.preload in its root, DT_NEEDED
// breadth-first), resolves each probed function in that very file, opens
// the file inside the target's view (so deleted files and other mount
// namespaces work), and attaches uprobes filtered to the pid, so no other
// process that maps the same library is trapped.
// Thread-safety: not thread-safe; used by the thread that owns the session.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <memory>
#include <utility>
#include <string>
#include <vector>

#include "core/probes/allocator_resolver.h"
#include "core/proc/proc_maps.h"
#include "core/platform/result.h"
#include "engine/bpf_session.h"
#include "view/process_view.h"

namespace lw {

struct AttachedObject {
  std::string path;        // as the target sees it
  uint64_t dev = 0;
  uint64_t inode = 0;
  std::string build_id;
  std::string role;        // the probe roles placed here: "libc", "libc,tcmalloc", ...
  std::vector<ProbeReport> probes;
  std::vector<Link> links;
  // File-offset ranges [start, end) of the probed functions' bodies: a
  // stack's frames inside them are the allocator's own, not the site.
  std::vector<std::pair<uint64_t, uint64_t>> function_ranges;
  // The probes are the session's shared link for this object
  // (decision shared-wrapper-links), not links of this process: `links` is
  // empty.
  bool shared = false;
  // Bursts (decision busy-processes): an allocator object's allocating
  // probes (every entry but free's and the realloc family's, and every
  // return) are links of their own, so that between two bursts they go
  // while the free side (`links`) stays. Empty while parked; `alloc_specs`
  // and `map` attach them again.
  std::vector<Link> alloc_links;
  std::vector<UprobeSpec> alloc_entries, alloc_returns;
  // Its free side, attached again after a park_free_side() (windows).
  std::vector<UprobeSpec> free_entries;
  std::optional<MapEntry> map;
};

// Whether an allocator function stays probed between two bursts: it frees
// a block (decision busy-processes).
bool frees_in_drain(uint32_t func);
// Marks `o`'s reports of one side's probes (matched by file offset) as
// parked or not: lifted between bursts, shown so in the status.
void mark_parked(AttachedObject& o, const std::vector<UprobeSpec>& side, bool parked);

// Processes with their own pid-filtered link on one libc's system-call
// wrappers (or on one ld.so's link-map hook) before the next one joins the
// shared link instead (decision shared-wrapper-links).
inline constexpr size_t kSharedSyscallLinkThreshold = 16;

// Bounds on what is read from the target (hostile input): its environment.
inline constexpr size_t kMaxEnvironBytes = 256 << 10;
// Reads at most `limit` bytes of a file; "" when it cannot be read.
// A /proc/PID/root/... path resolves inside that root (fd.h): a symlink in
// a container cannot point this read at a host file.
std::string read_bounded(const std::string& path, size_t limit);
// The tensor tier's probe objects (engine/tensor_attach.cc): they stay when
// the heap probes go, and go with the tier's own governor.
bool is_tensor_role(const std::string& role);

// How a process's mmap-family calls can be seen (AllocatorInfo::mmap_tracing).
enum class SyscallTracing { kPending, kWrappers, kTracepoints, kOff };

// The device of the process's CUDA records made on a thread whose current
// device was never seen (set before leakwatch attached): 0 when the process
// can see only one device (CUDA_VISIBLE_DEVICES, /dev/nvidiaN in its root;
// core/accounting/cuda_devices.h), else -1.
int sole_cuda_device_of(pid_t pid);

class ProcessAttacher {
 public:
  ProcessAttacher(BpfSession& session, pid_t pid) : session_(session), pid_(pid) {}

  // Scans the process's mappings, decides which objects' allocator functions
  // win, and attaches to every such object not attached yet (the first
  // call, after the loader maps the libraries, after a dlopen or an exec).
  // An unsupported process (stripped static binary, Go without cgo) gets no
  // probe and is not an error: allocator().support says why. Fails if the
  // process's maps cannot be read or the winning allocator's probes cannot
  // be attached. With place_probes false (mode light) only the decision is
  // made and reported; nothing is attached.
  Status attach_new_objects(bool place_probes = true);
  const AllocatorInfo& allocator() const { return info_; }
  // Whether file offset `offset` of the object (kernel device encoding,
  // inode) lies inside a function this attacher probes (operator new, a
  // syscall wrapper, ...).
  bool in_probed_function(uint32_t dev, uint64_t inode, uint64_t offset) const;

  // Whether attach_new_objects() places the optional CUDA probes (on by
  // default; off while the kill switch holds the process).
  void set_cuda(bool on) { cuda_ = on; }
  // Whether attach_new_objects() places the tensor tier's probes (on by
  // default; off for a target with `tensors: false`, while its governor
  // suspends them, and under the kill switch; decision tensor-tier).
  void set_tensors(bool on) { tensors_ = on; }
  // What the tensor tier found in the process: its state as far as the
  // attacher knows ("on", "unsupported", "none"), sources, refusals and
  // GPU allocator path (view/process_view.h TensorTierInfo).
  const TensorTierInfo& tensor_info() const { return tensor_info_; }
  // Whether probes that only lend a hint to the unwinder are placed (off
  // when stacks come from call-frame information; ProbeSpec::hint_only).
  void set_hint_probes(bool on) { hint_probes_ = on; }
  // Whether attach_new_objects() probes the libc system-call wrappers and
  // ld.so's _dl_debug_state (anonymous mmap accounting; on by default).
  void set_syscalls(bool on) { syscalls_ = on; }
  SyscallTracing syscall_tracing() const { return syscall_state_; }
  // Whether the wrappers are probed through the shared link
  // (decision shared-wrapper-links).
  bool shared_syscall_link() const;

  // Bursts (decision busy-processes): moves out the allocating side of the
  // allocator objects' probes (park, for the caller to close), leaving the
  // free side; objects attached while parked get their free side only.
  // unpark attaches the allocating side again; the first failure is
  // returned (the objects it failed on stay parked, tried at the next unpark).
  std::vector<Link> park_alloc_side();
  Status unpark_alloc_side();
  bool alloc_parked() const { return alloc_parked_; }
  // Windows (decision busy-processes, "Windows and walks"): with the
  // allocating side parked, moves out the free side of the allocator
  // objects too (no heap probe left), and attaches it again; the first
  // failure is returned (those objects stay parked, tried at the next
  // unpark). Objects attached while parked get their free side.
  std::vector<Link> park_free_side();
  Status unpark_free_side();
  bool free_parked() const { return free_parked_; }

  // Detaches every probe (in parallel, see destroy_links()).
  void detach_all();
  // Moves every probe link out (for a caller that closes many at once).
  std::vector<Link> take_links();
  // Moves out the links of the allocator objects (`heap`) and/or of the
  // CUDA objects (`cuda`), forgetting those objects, so a later
  // attach_new_objects() attaches them again.
  std::vector<Link> take_links(bool heap, bool cuda, bool tensor = false);
  // Whether the system-call wrappers go on the shared link once this many
  // processes have their own link on the same libc (tests: 0 = always).
  void set_shared_syscall_threshold(size_t n) { shared_threshold_ = n; }
  const std::vector<AttachedObject>& objects() const { return objects_; }
  pid_t pid() const { return pid_; }

 private:
  // One object's uprobes by link: entry probes, return probes, and the
  // tensor allocators' uprobe sessions (entry and return in one).
  struct ObjectSpecs {
    std::vector<UprobeSpec> entries, returns, sessions;
  };
  // Moves an allocator object's allocating entries and every return out of
  // `specs` into `obj` (decision busy-processes): `specs` keeps the free side.
  static void split_alloc_side(ObjectSpecs& specs, AttachedObject& obj);
  // Attaches `obj`'s allocating side through `fd_path` (after its free
  // side: a block allocated between the two would be recorded and its free
  // missed otherwise).
  Status attach_alloc_links(const std::string& fd_path, AttachedObject& obj);
  Result<std::vector<Link>> attach_links(const std::string& fd_path, const ObjectSpecs& specs,
                                         bool tensor);
  Status attach_object(const MapEntry& map, const ElfFile& elf,
                       const std::vector<const PlannedProbe*>& probes,
                       bool keep_on_failure = false);
  void attach_cuda_objects(const std::vector<LoadedObject>& objects,
                           const std::vector<MapEntry>& entries, std::optional<size_t> exe);
  void refresh_functions();
  // The tensor tier (engine/tensor_attach.cc): the framework libraries of
  // one scan, their allocators planned and attached, optional like CUDA's.
  struct ObjectScan;
  void attach_tensor_objects(const ObjectScan& scan);
  // Attaches the pytorch:malloc/free USDTs of libc10_cuda (mapped as `m`).
  void attach_torch_usdts(const MapEntry& m, const ElfFile& elf);
  bool tensor_object_known(const MapEntry& m, const char* role) const;
  bool torch_usdts_attached(const MapEntry& m) const;
  void refresh_tensor_info(const ObjectScan& scan);
  // Reads the maps, places the loader's and CUDA's probes, plans the
  // allocator's and places them (with `place_probes`).
  Status scan_and_attach(bool place_probes);
  // The mapped ELF objects of one scan, the mapping each is opened
  // through, which is the executable, and the first object we were not
  // allowed to open.
  struct ObjectScan {
    std::vector<LoadedObject> objects;
    std::vector<MapEntry> entries;
    std::optional<size_t> exe;
    std::optional<Error> open_denied;
  };
  struct ExeIdentity;  // the executable /proc/PID/exe names
  static ExeIdentity exe_identity(const std::string& proc);
  ObjectScan scan_objects(const ParsedMaps& maps, const ExeIdentity& exe);
  // The executable is not among the mappings: why, as the scan's result.
  Status no_executable(const std::string& proc, int exe_errno, const std::optional<Error>& open_denied);
  void record_plan(const AllocatorPlan& plan, const std::vector<LoadedObject>& objects,
                   const PreloadList& preload);
  // The plan's probes, object by object, the allocator's first.
  Status attach_planned(const AllocatorPlan& plan, const ObjectScan& scan);
  void attach_loader_objects(const std::vector<LoadedObject>& objects,
                             const std::vector<MapEntry>& entries);
  void attach_syscall_sites(const std::vector<LoadedObject>& objects,
                            const std::vector<MapEntry>& entries, const SearchOrder& search,
                            bool static_exe);
  void set_syscall_state(SyscallTracing state, std::string reason);
  // The probes on libc's system-call wrappers in `elf` (mapped through `m`),
  // or why a required one cannot be placed.
  struct WrapperProbes {
    std::vector<ProbeReport> reports;
    std::vector<UprobeSpec> specs;
    std::vector<std::pair<uint64_t, uint64_t>> ranges;  // the wrappers' code: the allocator's frames
    std::optional<uint64_t> seed_curbrk;  // __curbrk's vaddr, if brk_last needs a seed
    std::optional<std::string> failure;
  };
  static WrapperProbes wrapper_probes(const MapEntry& m, const ElfFile& elf);
  Status attach_shared(const MapEntry& m, const ElfFile& elf, const std::string& role,
                       std::vector<ProbeReport> reports,
                       const std::vector<UprobeSpec>& specs,
                       std::vector<std::pair<uint64_t, uint64_t>> ranges);
  // Writes glibc's __curbrk (at `curbrk_vaddr` in `elf`, mapped through
  // `m`) into lw_target.brk_last (decision brk-emulated-probe).
  void seed_brk_from(const MapEntry& m, const ElfFile& elf, uint64_t curbrk_vaddr);
  Status attach_fixed(const MapEntry& m, const ElfFile& elf, const std::string& role,
                      std::vector<ProbeReport> reports, const std::vector<UprobeSpec>& specs,
                      std::vector<std::pair<uint64_t, uint64_t>> ranges = {});

  BpfSession& session_;
  pid_t pid_;
  std::vector<AttachedObject> objects_;
  AllocatorInfo info_;
  bool hint_probes_ = true;
  bool cuda_ = true;
  bool tensors_ = true;
  TensorTierInfo tensor_info_;
  std::vector<std::string> tensor_refusals_;  // "libc10.so: ...", accumulated per object
  bool syscalls_ = true;
  bool alloc_parked_ = false;  // park_alloc_side() .. unpark_alloc_side()
  bool free_parked_ = false;   // park_free_side() .. unpark_free_side()
  size_t shared_threshold_ = kSharedSyscallLinkThreshold;
  bool loader_attached_now_ = false;  // set by attach_loader_objects()
  SyscallTracing syscall_state_ = SyscallTracing::kPending;
  // Parsed objects by (dev, inode); nullptr for files that are not ELF.
  std::map<std::pair<uint64_t, uint64_t>, std::shared_ptr<const ElfFile>> elf_cache_;
};

}  // namespace lw
