// SPDX-License-Identifier: Apache-2.0
// cfi_identity(): the content hash that keys unwind tables in memory and on
// disk (decision file-identity).
#include <openssl/evp.h>

#include <cstdio>
#include <memory>

#include "core/unwind/unwind_table.h"

namespace lw {

namespace {

struct DigestDeleter {
  void operator()(EVP_MD_CTX* ctx) const { EVP_MD_CTX_free(ctx); }
};

class Sha256 {
 public:
  Sha256() : ctx_(EVP_MD_CTX_new()) {
    ok_ = ctx_ != nullptr && EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr) == 1;
  }
  void add(const void* data, size_t n) {
    if (ok_ && n > 0) ok_ = EVP_DigestUpdate(ctx_.get(), data, n) == 1;
  }
  // Fixed width and byte order, so that fields cannot run into each other.
  void add_u64(uint64_t v) {
    uint8_t le[8];
    for (int i = 0; i < 8; ++i) le[i] = static_cast<uint8_t>(v >> (8 * i));
    add(le, sizeof(le));
  }
  std::string hex() {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    if (!ok_ || EVP_DigestFinal_ex(ctx_.get(), md, &n) != 1) return "";
    std::string out;
    char two[3];
    for (unsigned int i = 0; i < n; ++i) {
      snprintf(two, sizeof(two), "%02x", md[i]);
      out += two;
    }
    return out;
  }

 private:
  std::unique_ptr<EVP_MD_CTX, DigestDeleter> ctx_;
  bool ok_ = false;
};

}  // namespace

std::string cfi_identity(const CfiInput& input) {
  Sha256 h;
  static constexpr char kDomain[] = "leakwatch cfi identity 1";
  h.add(kDomain, sizeof(kDomain));
  h.add_u64(static_cast<uint64_t>(input.cfi.format));
  h.add_u64(input.cfi.vaddr);
  h.add_u64(input.cfi.text_vaddr.has_value());
  h.add_u64(input.cfi.text_vaddr.value_or(0));
  h.add_u64(input.cfi.data_vaddr.has_value());
  h.add_u64(input.cfi.data_vaddr.value_or(0));
  h.add_u64(input.segments.size());
  for (const ElfSegment& s : input.segments) {
    h.add_u64(s.vaddr);
    h.add_u64(s.memsz);
    h.add_u64(s.offset);
    h.add_u64(s.filesz);
    h.add_u64(s.executable);
  }
  h.add_u64(input.bytes.size());
  h.add(input.bytes.data(), input.bytes.size());
  return h.hex();
}

}  // namespace lw
