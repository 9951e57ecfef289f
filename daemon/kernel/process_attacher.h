// Attaches the allocator probes to one process: finds its libc and
// libstdc++ in /proc/PID/maps (a container has its own), resolves each
// probed function in that very file, opens the file inside the target's
// view (so deleted files and other mount namespaces work), and attaches
// uprobes filtered to the pid, so no other process that maps the same
// library is trapped.
// Thread-safety: not thread-safe; used by the thread that owns the session.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "daemon/core/proc_maps.h"
#include "daemon/core/result.h"
#include "daemon/kernel/bpf_session.h"

namespace lw {

// What was decided for one probed function; exposed through the API so
// "why does nothing show" has an answer.
struct ProbeReport {
  std::string symbols;     // "aligned_alloc,memalign" when they share an address
  uint64_t file_offset = 0;
  bool retprobe = false;
  std::string placement;   // "entry", "after NULL check", ...
  bool attached = false;
  std::string error;       // why not, when !attached
};

struct AttachedObject {
  std::string path;        // as the target sees it
  uint64_t dev = 0;
  uint64_t inode = 0;
  std::string build_id;
  std::string role;        // "libc" or "libstdc++"
  std::vector<ProbeReport> probes;
  std::vector<Link> links;
};

class ProcessAttacher {
 public:
  ProcessAttacher(BpfSession& session, pid_t pid) : session_(session), pid_(pid) {}

  // Scans the process's mappings and attaches to every allocator object not
  // attached yet (the first call, and after a dlopen). Fails only if the
  // process's maps cannot be read or no libc malloc/free could be probed on
  // the first call.
  Status attach_new_objects();

  // What to attach: the allocator probes (libc, libstdc++) and/or the
  // optional CUDA probes (cuda_probes.h). Both by default.
  void set_scope(bool allocators, bool cuda) {
    allocators_ = allocators;
    cuda_ = cuda;
  }

  // Detaches every probe (in parallel, see destroy_links()).
  void detach_all();
  // Moves every probe link out (for a caller that closes many at once).
  std::vector<Link> take_links();
  const std::vector<AttachedObject>& objects() const { return objects_; }
  pid_t pid() const { return pid_; }

 private:
  Status attach_object(const MapEntry& map, const std::string& role);

  BpfSession& session_;
  pid_t pid_;
  std::vector<AttachedObject> objects_;
  bool allocators_ = true;
  bool cuda_ = true;
};

// "libc" or "libstdc++" for an object path we probe, else "".
std::string allocator_role(const std::string& path);

}  // namespace lw
