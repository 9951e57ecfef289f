// SPDX-License-Identifier: Apache-2.0
#include "core/symbols/debug_file.h"

#include <fcntl.h>
#include <lzma.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>

namespace lw {

namespace {

// liblzma's decoder memory (dictionary): xz -9 needs 65 MiB to decode;
// MiniDebugInfo is written with the default preset (-6, 9 MiB).
constexpr uint64_t kXzMemLimit = 64u << 20;

std::string dir_of(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return "";
  return path.substr(0, slash);  // "" for "/x": the root
}

bool safe_link_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.size() <= 255;
}

// Build-ids are hex from our own reader; anything else would be a path.
bool hex_build_id(const std::string& id) {
  if (id.size() < 2 || id.size() > 128) return false;
  for (char c : id)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

// One file opened in `root` ("" = the daemon's own), regular, O_NONBLOCK.
Result<int> open_candidate(const std::string& root, const std::string& path) {
  if (!root.empty()) return open_in_root(root, path);
  return open_untrusted_file(path);
}

// Whether /proc/PID/root is the daemon's own root: then searching it again
// would only repeat the same opens.
bool same_root(const std::string& root) {
  struct stat a, b;
  return stat(root.c_str(), &a) == 0 && stat("/", &b) == 0 && a.st_dev == b.st_dev &&
         a.st_ino == b.st_ino;
}

std::vector<std::string> roots_of(const std::string& target_root) {
  std::vector<std::string> roots;
  if (!target_root.empty() && !same_root(target_root)) roots.push_back(target_root);
  roots.push_back("");
  return roots;
}

// Opens and checks one candidate. `want_build_id` "" skips the build-id
// check (only for a debug link of an object without one: the CRC decides).
std::optional<DebugFile> try_candidate(const std::string& root, const DebugCandidate& c,
                                       const std::string& want_build_id, bool check_crc,
                                       uint32_t crc, const DebugSearchOptions& options,
                                       DebugLookupStats* stats) {
  Result<int> opened = open_candidate(root, c.path);
  if (!opened) return std::nullopt;  // absent: the usual case, not counted
  Fd fd(*opened);
  struct stat st;
  if (fstat(fd.get(), &st) != 0) return std::nullopt;
  // libdebuginfod's negative-cache entries are empty files.
  if (st.st_size == 0) return std::nullopt;
  if (static_cast<uint64_t>(st.st_size) > options.max_file_bytes) {
    if (stats) ++stats->rejected_file;
    return std::nullopt;
  }
  auto elf = ElfFile::open_fd(fd.get(), root + c.path, ElfOpenOptions{.index_symbols = false});
  if (!elf) {
    if (stats) ++stats->rejected_file;
    return std::nullopt;
  }
  if (!want_build_id.empty() && (*elf)->build_id() != want_build_id) {
    if (stats) ++stats->rejected_build_id;
    return std::nullopt;
  }
  if (check_crc) {
    std::optional<uint32_t> got = file_crc32(fd.get(), options.max_file_bytes);
    if (!got || *got != crc) {
      if (stats) ++stats->rejected_crc;
      return std::nullopt;
    }
  }
  DebugFile out;
  out.fd = std::move(fd);
  out.path = root + c.path;
  out.source = c.source;
  out.elf = std::move(*elf);
  return out;
}

}  // namespace

const char* debug_source_name(DebugSource source) {
  switch (source) {
    case DebugSource::kNone: return "none";
    case DebugSource::kSelf: return "self";
    case DebugSource::kDebugData: return "debugdata";
    case DebugSource::kDebugLink: return "debuglink";
    case DebugSource::kBuildIdDir: return "build_id_dir";
    case DebugSource::kDebuginfod: return "debuginfod";
  }
  return "none";
}

std::vector<DebugCandidate> debug_file_candidates(const std::string& object_path,
                                                  const std::string& build_id,
                                                  const std::string& debuglink,
                                                  const std::vector<std::string>& debug_dirs) {
  std::vector<DebugCandidate> out;
  if (hex_build_id(build_id)) {
    for (const std::string& dir : debug_dirs) {
      out.push_back({dir + "/.build-id/" + build_id.substr(0, 2) + "/" + build_id.substr(2) + ".debug",
                     DebugSource::kBuildIdDir});
    }
  }
  if (safe_link_name(debuglink) && !object_path.empty() && object_path[0] == '/') {
    const std::string dir = dir_of(object_path);
    out.push_back({dir + "/" + debuglink, DebugSource::kDebugLink});
    out.push_back({dir + "/.debug/" + debuglink, DebugSource::kDebugLink});
    for (const std::string& d : debug_dirs) out.push_back({d + dir + "/" + debuglink, DebugSource::kDebugLink});
  }
  return out;
}

std::optional<DebugFile> find_debug_file(const DebugFileQuery& query,
                                         const DebugSearchOptions& options,
                                         DebugLookupStats* stats) {
  const std::vector<DebugCandidate> candidates =
      debug_file_candidates(query.object_path, query.build_id, query.debuglink, options.debug_dirs);
  const std::vector<std::string> roots = roots_of(query.target_root);
  for (const std::string& root : roots) {
    for (const DebugCandidate& c : candidates) {
      // A debug link names a path in the target's mount namespace: in
      // another root than the daemon's it is never looked up in the
      // daemon's own (issue 32, item 4). Build-id directories are: a host's
      // debug package serves a container's object of the same build-id.
      if (root.empty() && roots.size() > 1 && c.source == DebugSource::kDebugLink) continue;
      // A debug link is always CRC-checked: the file next to the object
      // may be the object itself (a link naming its own file), whose
      // build-id matches but which adds nothing.
      const bool link = c.source == DebugSource::kDebugLink;
      if (auto f = try_candidate(root, c, query.build_id, link, query.debuglink_crc, options, stats))
        return f;
    }
  }
  if (!options.debuginfod_cache_dir.empty() && hex_build_id(query.build_id)) {
    DebugCandidate c{options.debuginfod_cache_dir + "/" + query.build_id + "/debuginfo",
                     DebugSource::kDebuginfod};
    if (auto f = try_candidate("", c, query.build_id, false, 0, options, stats)) return f;
  }
  return std::nullopt;
}

std::optional<DebugFile> find_alt_file(const std::string& link_path, const std::string& link_build_id,
                                       const std::string& debug_file_path,
                                       const std::string& target_root,
                                       const DebugSearchOptions& options, DebugLookupStats* stats) {
  if (!hex_build_id(link_build_id)) return std::nullopt;
  std::vector<DebugCandidate> candidates;
  for (const std::string& dir : options.debug_dirs) {
    candidates.push_back({dir + "/.build-id/" + link_build_id.substr(0, 2) + "/" +
                              link_build_id.substr(2) + ".debug",
                          DebugSource::kBuildIdDir});
  }
  if (!link_path.empty() && link_path.size() <= 4096) {
    if (link_path[0] == '/') {
      candidates.push_back({link_path, DebugSource::kDebugLink});
    } else if (!debug_file_path.empty() && debug_file_path[0] == '/') {
      candidates.push_back({dir_of(debug_file_path) + "/" + link_path, DebugSource::kDebugLink});
    }
  }
  const std::vector<std::string> roots = roots_of(target_root);
  for (const std::string& root : roots) {
    for (const DebugCandidate& c : candidates) {
      if (root.empty() && roots.size() > 1 && c.source == DebugSource::kDebugLink) continue;  // as above
      if (auto f = try_candidate(root, c, link_build_id, false, 0, options, stats)) return f;
    }
  }
  return std::nullopt;
}

Result<std::string> xz_decompress(std::span<const uint8_t> in, size_t max_out) {
  lzma_stream strm = LZMA_STREAM_INIT;
  if (lzma_stream_decoder(&strm, kXzMemLimit, 0) != LZMA_OK) return Error{ENOMEM, "lzma decoder"};
  std::string out;
  strm.next_in = in.data();
  strm.avail_in = in.size();
  // Grown in steps up to max_out + 1 bytes: one byte more says "too big".
  const size_t cap = max_out + 1;
  lzma_ret ret = LZMA_OK;
  for (;;) {
    if (strm.avail_out == 0) {
      const size_t used = out.size();  // all of it is output once avail_out is 0
      if (used >= cap) break;
      const size_t grow = std::min<size_t>(std::max<size_t>(used, 64 << 10), cap - used);
      out.resize(used + grow);
      strm.next_out = reinterpret_cast<uint8_t*>(out.data()) + used;
      strm.avail_out = grow;
    }
    ret = lzma_code(&strm, LZMA_FINISH);
    if (ret != LZMA_OK) break;  // LZMA_STREAM_END, or an error (LZMA_BUF_ERROR: truncated)
  }
  const size_t total = static_cast<size_t>(strm.total_out);
  lzma_end(&strm);
  if (total > max_out) return Error{EFBIG, "decompressed data over " + std::to_string(max_out) + " bytes"};
  if (ret == LZMA_MEMLIMIT_ERROR) return Error{EFBIG, "xz decoder needs more than 64 MiB"};
  if (ret != LZMA_STREAM_END) return Error{EINVAL, "corrupt xz data (" + std::to_string(ret) + ")"};
  out.resize(total);
  return out;
}

std::optional<DebugFile> extract_debugdata(const ElfFile& object, const DebugSearchOptions& options,
                                           DebugLookupStats* stats) {
  const ElfDebugLinks& links = object.debug_links();
  if (links.debugdata_size == 0) return std::nullopt;
  auto refuse = [&]() -> std::optional<DebugFile> {
    if (stats) ++stats->rejected_debugdata;
    return std::nullopt;
  };
  if (links.debugdata_size > options.max_debugdata_bytes) return refuse();
  std::vector<uint8_t> packed =
      object.read_at_offset(links.debugdata_offset, static_cast<size_t>(links.debugdata_size));
  if (packed.size() != links.debugdata_size) return refuse();
  Result<std::string> elf_bytes = xz_decompress(packed, static_cast<size_t>(options.max_debugdata_bytes));
  if (!elf_bytes) return refuse();
  Fd fd(memfd_create("lw-minidebuginfo", MFD_CLOEXEC));
  if (!fd.valid()) return std::nullopt;
  size_t written = 0;
  while (written < elf_bytes->size()) {
    ssize_t n = write(fd.get(), elf_bytes->data() + written, elf_bytes->size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return std::nullopt;
    written += static_cast<size_t>(n);
  }
  if (lseek(fd.get(), 0, SEEK_SET) != 0) return std::nullopt;
  auto elf = ElfFile::open_fd(fd.get(), object.path() + " .gnu_debugdata",
                              ElfOpenOptions{.index_symbols = false});
  // Only a symbol table is of use; and libdwfl must not fall back to
  // decompressing .gnu_debugdata on its own (see the header).
  if (!elf || !(*elf)->debug_links().has_symtab) return refuse();
  DebugFile out;
  out.fd = std::move(fd);
  out.path = object.path() + " .gnu_debugdata";
  out.source = DebugSource::kDebugData;
  out.elf = std::move(*elf);
  return out;
}

std::optional<uint32_t> file_crc32(int fd, uint64_t max_bytes) {
  uLong crc = crc32(0L, Z_NULL, 0);
  std::vector<unsigned char> buf(1 << 16);
  uint64_t offset = 0;
  for (;;) {
    ssize_t n = pread(fd, buf.data(), buf.size(), static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return std::nullopt;
    if (n == 0) break;
    offset += static_cast<uint64_t>(n);
    if (offset > max_bytes) return std::nullopt;
    crc = crc32(crc, buf.data(), static_cast<uInt>(n));
  }
  return static_cast<uint32_t>(crc);
}

}  // namespace lw
