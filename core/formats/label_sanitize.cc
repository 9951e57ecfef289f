// SPDX-License-Identifier: Apache-2.0
#include "core/formats/label_sanitize.h"

#include <algorithm>

namespace lw {

namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD
constexpr std::string_view kEllipsis = "\xE2\x80\xA6";     // U+2026

struct Decoded {
  char32_t cp = 0;
  size_t len = 1;  // bytes consumed: the sequence, or its maximal ill-formed subpart
  bool valid = false;
};

// Decodes one character at s[i] following Unicode Table 3-7 (well-formed
// UTF-8 byte sequences). The narrowed second-byte ranges after E0, ED, F0
// and F4 are what reject overlong forms, surrogates and values past
// U+10FFFF; C0, C1 and F5..FF can never start a sequence.
Decoded decode(std::string_view s, size_t i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) return {b0, 1, true};

  size_t trailing = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the next byte
  char32_t cp = 0;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    trailing = 1;
    cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    trailing = 2;
    cp = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;  // below: overlong
    if (b0 == 0xED) hi = 0x9F;  // above: surrogates U+D800..U+DFFF
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    trailing = 3;
    cp = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;  // below: overlong
    if (b0 == 0xF4) hi = 0x8F;  // above: past U+10FFFF
  } else {
    return {0, 1, false};
  }

  size_t len = 1;
  for (size_t k = 0; k < trailing; ++k) {
    if (i + len >= s.size()) return {0, len, false};
    const auto b = static_cast<unsigned char>(s[i + len]);
    if (b < lo || b > hi) return {0, len, false};
    cp = (cp << 6) | (b & 0x3F);
    ++len;
    lo = 0x80;
    hi = 0xBF;
  }
  return {cp, len, true};
}

bool is_control(char32_t cp) { return cp < 0x20 || (cp >= 0x7F && cp <= 0x9F); }

}  // namespace

std::string sanitize_label_value(std::string_view in, size_t max_bytes) {
  // Room for text when the value has to be cut (the ellipsis needs the rest).
  const size_t keep = max_bytes >= kEllipsis.size() ? max_bytes - kEllipsis.size() : max_bytes;
  std::string out;
  out.reserve(std::min(in.size(), max_bytes) + kReplacement.size());
  size_t cut = 0;  // output length at the last character boundary <= keep
  for (size_t i = 0; i < in.size();) {
    const Decoded d = decode(in, i);
    if (!d.valid) {
      out += kReplacement;
    } else if (is_control(d.cp)) {
      out += '?';
    } else {
      out += in.substr(i, d.len);
    }
    i += d.len;
    if (out.size() <= keep) cut = out.size();
    if (out.size() > max_bytes) {
      out.resize(cut);
      if (max_bytes >= kEllipsis.size()) out += kEllipsis;
      return out;
    }
  }
  return out;
}

}  // namespace lw
