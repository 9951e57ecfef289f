// SPDX-License-Identifier: Apache-2.0
// Tracer: the Python frames of a stored stack, spliced into its native
// frames (decision python-frames). Split from tracer.cc.
#include "core/symbols/python_frames.h"
#include "engine/python_process.h"
#include "engine/tracer.h"

namespace lw {

void Tracer::splice_python_frames(TracedProcess& proc, const StoredStack& stored,
                                  const std::vector<bool>& is_eval, std::vector<Frame>& physical,
                                  ResolvedStack& rs) {
  if (!proc.python) return;
  std::vector<bool> entry;
  std::vector<Frame> python = proc.python->resolve(stored.py, entry);
  if (!python.empty()) {
    // The id hashes the merged stack (Python frames as file, name, line);
    // render_symbols() splices the same frames into each rendering.
    physical = merge_python_frames(physical, is_eval, python, entry);
    rs.python = std::move(python);
    rs.python_entry = std::move(entry);
    rs.is_eval = is_eval;
  }
  // A native stack that is complete but whose Python chain was cut says so.
  const uint32_t py_end = stored.py_flags & LW_PY_END_MASK;
  if (rs.end.empty() && py_end == LW_PY_DEPTH) rs.end = "python_depth";
  if (rs.end.empty() && py_end == LW_PY_READ_FAILED) rs.end = "python_read_failed";
}

}  // namespace lw
