/* SPDX-License-Identifier: Apache-2.0 */
// One traced process's CPython, if it runs one: found in its mappings (the
// executable or a libpython, by the interpreter's symbols and the version
// the binary declares), registered with the BPF side (py_procs) once the
// interpreter has its thread-state key, and the reader that turns stored
// Python frames into function, file and line from the process's memory.
// decision python-frames.
// Thread-safety: not thread-safe (the Tracer's thread).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "core/proc/proc_maps.h"
#include "core/symbols/python_frames.h"
#include "core/symbols/python_runtime.h"
#include "engine/bpf_session.h"
#include "view/process_view.h"

namespace lw {

// process_vm_readv on one process, at most 1 MiB a read.
class ProcessMemory : public TargetMemory {
 public:
  explicit ProcessMemory(pid_t pid) : pid_(pid) {}
  bool read(uint64_t addr, void* out, size_t len) override;

 private:
  pid_t pid_;
};

class PythonProcess {
 public:
  explicit PythonProcess(pid_t pid) : pid_(pid), memory_(pid) {}

  // Looks at objects of `maps` not seen before for an interpreter and, once
  // found and supported, registers the process with the BPF side when the
  // interpreter has created its thread-state key (retried on later calls
  // until it has: a process attached at exec has not started Python yet).
  void refresh(BpfSession& session, const ParsedMaps& maps);
  // The image changed (exec): forget everything, unregister.
  void reset(BpfSession& session);
  // Found and supported but not registered yet: try again (one read of
  // the target's memory).
  bool wants_retry() const { return layout_ && tsd_key0_ && !status_.frames; }
  void retry(BpfSession& session) { try_register(session); }

  const PythonInfo& status() const { return status_; }
  bool registered() const { return status_.frames; }

  // Whether the frame at file offset `offset` (a return address, or the
  // leaf's pc) of the object (dev, ino) lies in _PyEval_EvalFrameDefault.
  bool is_eval_frame(uint32_t dev, uint64_t ino, uint64_t offset) const;

  // The stored Python frames as shown, innermost first; `entry` receives
  // each frame's LW_PYF_ENTRY.
  std::vector<Frame> resolve(const std::vector<lw_py_frame>& py, std::vector<bool>& entry);

  const PythonCodeCache& cache() const { return cache_; }

 private:
  void try_register(BpfSession& session);
  void find_tsd_offset(const ParsedMaps& maps);

  pid_t pid_;
  ProcessMemory memory_;
  PythonInfo status_;
  std::set<std::tuple<uint32_t, uint64_t>> seen_;  // (kernel dev, inode) looked at
  const PythonLayout* layout_ = nullptr;
  uint32_t dev_ = 0;       // the interpreter object's kernel dev and inode
  uint64_t ino_ = 0;
  uint64_t eval_start_ = 0, eval_end_ = 0;  // file offsets
  uint64_t runtime_addr_ = 0, code_type_addr_ = 0;
  uint32_t tsd_key0_ = 0;  // 0: not found yet
  PythonCodeCache cache_;
};

}  // namespace lw
