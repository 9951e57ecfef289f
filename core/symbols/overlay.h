// SPDX-License-Identifier: Apache-2.0
// Files mapped from overlayfs (containers): the kernel maps the layer's
// own file (a "backing file"), so the BPF side, which reads
// vma->vm_file->f_inode, sees the layer file's (device, inode), while
// /proc/PID/maps, map_files and stat() show the overlay's (file_user_inode()
// since the backing-file rework of kernel 6.x). The daemon keys objects by
// what /proc shows; this finds the layer file behind an overlay path so
// both identities can be tied together (engine/unwind_tables.cc).
//
// Pure parsing (parse_overlay_mount, overlay_layer_paths) plus a thin
// lookup (overlay_backing_identity). Thread-safety: free functions.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/proc/proc_maps.h"
#include "core/platform/result.h"

namespace lw {

struct OverlayMount {
  std::string mount_point;          // as the process sees it (its mountinfo)
  std::string root;                 // the mount's root inside the overlay ("/" mostly)
  std::vector<std::string> layers;  // lookup order: upperdir, lowerdirs top first, data-only layers
};

// The overlay mount with device major:minor in the text of a
// /proc/PID/mountinfo, or nullopt (no such mount, or not overlayfs). Paths
// are unescaped (octal \NNN as the kernel writes them); layer paths are as
// the mounter gave them. Never throws; malformed lines are skipped.
std::optional<OverlayMount> parse_overlay_mount(std::string_view mountinfo, uint32_t major, uint32_t minor);

// Where `path` (a path the process sees, under m.mount_point) lies in each
// layer, in lookup order; empty when it is not under the mount point.
std::vector<std::string> overlay_layer_paths(const OverlayMount& m, const std::string& path);

// The layer file behind mapping `m` of `pid`: its (kernel-encoded) device
// and inode, and its path as the daemon sees it.
struct OverlayBacking {
  uint32_t dev = 0;
  uint64_t ino = 0;
  std::string path;
};

// The layer file behind mapping `m` of `pid` when `m` is on overlayfs and
// the file's identity differs from m's own; nullopt otherwise (not
// overlayfs, or no layer file found). The first layer holding the file
// wins, as in the overlay's own lookup, skipping metadata-only copy-ups;
// it must be a regular file of the overlay file's size. The layer paths
// are the mounter's, so whoever made the mount chose them: the caller
// checks the file's content (engine/unwind_tables.cc compares build-ids).
// `overlay_fd`: the mapped file, opened (open_mapped_file).
std::optional<OverlayBacking> overlay_backing_file(pid_t pid, const MapEntry& m, int overlay_fd);

}  // namespace lw
