// SPDX-License-Identifier: Apache-2.0
#include "core/symbols/overlay.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>

#include "core/platform/fd.h"
#include "core/symbols/stack_frames.h"

namespace lw {

namespace {

bool is_octal(char c) { return c >= '0' && c <= '7'; }

// Undoes the kernel's seq_escape in /proc/PID/mountinfo (\NNN octal).
std::string octal_unescape(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && is_octal(s[i + 1]) && is_octal(s[i + 2]) && is_octal(s[i + 3])) {
      out.push_back(static_cast<char>(((s[i + 1] - '0') << 6) | ((s[i + 2] - '0') << 3) | (s[i + 3] - '0')));
      i += 3;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

// overlayfs shows its layer options as the mounter wrote them, where "\:"
// is a colon inside a path and ":" separates lower layers. Splits at the
// unescaped separators (none when `separator` is 0) and drops the escapes.
std::vector<std::string> split_layers(const std::string& s, char separator) {
  std::vector<std::string> out(1);
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size()) {
      out.back().push_back(s[++i]);
    } else if (separator && s[i] == separator) {
      out.emplace_back();
    } else {
      out.back().push_back(s[i]);
    }
  }
  return out;
}

std::string layer_path(std::string_view value) { return split_layers(octal_unescape(value), 0).front(); }

std::vector<std::string_view> split_fields(std::string_view line) {
  std::vector<std::string_view> fields;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && line[i] == ' ') ++i;
    size_t j = i;
    while (j < line.size() && line[j] != ' ') ++j;
    if (j > i) fields.push_back(line.substr(i, j - i));
    i = j;
  }
  return fields;
}

}  // namespace

std::optional<OverlayMount> parse_overlay_mount(std::string_view mountinfo, uint32_t major, uint32_t minor) {
  const std::string dev = std::to_string(major) + ":" + std::to_string(minor);
  while (!mountinfo.empty()) {
    size_t nl = mountinfo.find('\n');
    std::string_view line = mountinfo.substr(0, nl);
    mountinfo = nl == std::string_view::npos ? std::string_view() : mountinfo.substr(nl + 1);
    // ID PARENT MAJ:MIN ROOT MOUNT_POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER_OPTIONS
    std::vector<std::string_view> f = split_fields(line);
    if (f.size() < 10 || f[2] != dev) continue;
    size_t dash = 6;
    while (dash < f.size() && f[dash] != "-") ++dash;
    if (dash + 3 >= f.size() || f[dash + 1] != "overlay") continue;
    OverlayMount m;
    m.root = octal_unescape(f[3]);
    m.mount_point = octal_unescape(f[4]);
    std::vector<std::string> upper, lower, data;
    std::string_view opts = f[dash + 3];
    while (!opts.empty()) {
      size_t comma = opts.find(',');
      std::string_view opt = opts.substr(0, comma);
      opts = comma == std::string_view::npos ? std::string_view() : opts.substr(comma + 1);
      size_t eq = opt.find('=');
      if (eq == std::string_view::npos) continue;
      std::string_view key = opt.substr(0, eq), value = opt.substr(eq + 1);
      if (key == "upperdir") {
        upper.push_back(layer_path(value));
      } else if (key == "lowerdir") {
        // "a:b::c": c is a data-only layer, after "::" (kernel 6.5+).
        for (std::string& dir : split_layers(octal_unescape(value), ':'))
          if (!dir.empty()) lower.push_back(std::move(dir));
      } else if (key == "lowerdir+") {
        lower.push_back(layer_path(value));
      } else if (key == "datadir+") {
        data.push_back(layer_path(value));
      }
    }
    for (auto* list : {&upper, &lower, &data})
      for (std::string& dir : *list) m.layers.push_back(std::move(dir));
    if (m.layers.empty() || m.mount_point.empty() || m.mount_point[0] != '/') return std::nullopt;
    return m;
  }
  return std::nullopt;
}

std::vector<std::string> overlay_layer_paths(const OverlayMount& m, const std::string& path) {
  std::string rel;
  if (m.mount_point == "/") {
    rel = path;
  } else if (path.size() > m.mount_point.size() && path.compare(0, m.mount_point.size(), m.mount_point) == 0 &&
             path[m.mount_point.size()] == '/') {
    rel = path.substr(m.mount_point.size());
  } else {
    return {};
  }
  if (rel.empty() || rel[0] != '/' || rel.find("/../") != std::string::npos) return {};
  const std::string root = m.root == "/" ? "" : m.root;
  std::vector<std::string> out;
  for (const std::string& layer : m.layers) out.push_back(layer + root + rel);
  return out;
}

std::optional<OverlayBacking> overlay_backing_file(pid_t pid, const MapEntry& m, int overlay_fd) {
  // overlayfs has an anonymous device (major 0): nothing else is looked up.
  if (m.dev_major != 0) return std::nullopt;
  struct stat overlay_st;
  if (fstat(overlay_fd, &overlay_st) != 0) return std::nullopt;
  Result<std::string> mountinfo = read_regular_file("/proc/" + std::to_string(pid) + "/mountinfo", 4u << 20);
  if (!mountinfo) return std::nullopt;
  std::optional<OverlayMount> mount = parse_overlay_mount(*mountinfo, m.dev_major, m.dev_minor);
  if (!mount) return std::nullopt;
  // The layer paths are the mounter's (the container runtime's, on the
  // host): only looked at here.
  for (const std::string& candidate : overlay_layer_paths(*mount, m.path)) {
    struct stat st;
    if (lstat(candidate.c_str(), &st) != 0) continue;
    if (!S_ISREG(st.st_mode)) return std::nullopt;
    // A metadata-only copy-up: the data, and so the mapping, is lower down.
    if (lgetxattr(candidate.c_str(), "trusted.overlay.metacopy", nullptr, 0) >= 0 ||
        lgetxattr(candidate.c_str(), "user.overlay.metacopy", nullptr, 0) >= 0)
      continue;
    if (st.st_size != overlay_st.st_size) return std::nullopt;
    const uint32_t dev = kernel_dev(major(st.st_dev), minor(st.st_dev));
    if (dev == kernel_dev(m.dev_major, m.dev_minor) && st.st_ino == m.inode) return std::nullopt;
    return OverlayBacking{dev, static_cast<uint64_t>(st.st_ino), candidate};
  }
  return std::nullopt;
}

}  // namespace lw
