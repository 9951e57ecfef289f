// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "core/formats/label_sanitize.h"

namespace lw {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";
const std::string kEllipsis = "\xE2\x80\xA6";
const std::string kEmoji = "\xF0\x9F\x98\x80";  // U+1F600, 4 bytes

// Valid UTF-8 by an independent, table-free check (Unicode Table 3-7).
bool is_valid_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    size_t n = b < 0x80                 ? 1
               : b >= 0xC2 && b <= 0xDF ? 2
               : b >= 0xE0 && b <= 0xEF ? 3
               : b >= 0xF0 && b <= 0xF4 ? 4
                                        : 0;
    if (n == 0 || i + n > s.size()) return false;
    uint32_t cp = n == 1 ? b : b & (0xFF >> (n + 1));
    for (size_t k = 1; k < n; ++k) {
      const auto c = static_cast<unsigned char>(s[i + k]);
      if ((c & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (c & 0x3F);
    }
    const uint32_t min[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n;
  }
  return true;
}

TEST(SanitizeLabelValue, PlainTextUnchanged) {
  EXPECT_EQ(sanitize_label_value("model-server.service"), "model-server.service");
  EXPECT_EQ(sanitize_label_value("Grüße 世界 " + kEmoji), "Grüße 世界 " + kEmoji);
}

TEST(SanitizeLabelValue, EmptyStaysEmpty) { EXPECT_EQ(sanitize_label_value(""), ""); }

TEST(SanitizeLabelValue, HostileExpositionText) {
  // Quote and backslash are the serializer's to escape; they survive here.
  // The newline, which could start a forged sample line, does not.
  EXPECT_EQ(sanitize_label_value("a\"b\n{x=\"1\"}"), "a\"b?{x=\"1\"}");
  EXPECT_EQ(sanitize_label_value("c:\\path\\"), "c:\\path\\");
}

TEST(SanitizeLabelValue, ControlCharactersBecomeQuestionMarks) {
  EXPECT_EQ(sanitize_label_value(std::string("a\0b", 3)), "a?b");
  EXPECT_EQ(sanitize_label_value("\t\r\x1b[31m\x7f"), "???[31m?");
  // C1 controls U+0080 and U+009F (valid UTF-8, still controls).
  EXPECT_EQ(sanitize_label_value("x\xC2\x80y\xC2\x9Fz"), "x?y?z");
  // U+00A0 is the first non-control after C1.
  EXPECT_EQ(sanitize_label_value("\xC2\xA0"), "\xC2\xA0");
}

TEST(SanitizeLabelValue, InvalidBytesBecomeReplacementCharacters) {
  EXPECT_EQ(sanitize_label_value("a\xFF"
                                 "b"),
            "a" + kFffd + "b");
  EXPECT_EQ(sanitize_label_value("\x80"), kFffd);  // lone continuation
  EXPECT_EQ(sanitize_label_value("\xF5\x80\x80\x80"), kFffd + kFffd + kFffd + kFffd);
  // Truncated sequence at the end: one U+FFFD for the maximal subpart.
  EXPECT_EQ(sanitize_label_value("ok\xE2\x82"), "ok" + kFffd);
  EXPECT_EQ(sanitize_label_value("\xF0\x9F\x98"), kFffd);
  // Truncated sequence followed by ASCII: the ASCII survives.
  EXPECT_EQ(sanitize_label_value("\xE2\x82z"), kFffd + "z");
}

TEST(SanitizeLabelValue, OverlongEncodingsRejected) {
  EXPECT_EQ(sanitize_label_value("\xC0\x80"), kFffd + kFffd);  // NUL, 2 bytes
  EXPECT_EQ(sanitize_label_value("\xC1\xBF"), kFffd + kFffd);
  EXPECT_EQ(sanitize_label_value("\xE0\x80\xAF"), kFffd + kFffd + kFffd);  // '/', 3 bytes
  EXPECT_EQ(sanitize_label_value("\xF0\x80\x80\xAF"), kFffd + kFffd + kFffd + kFffd);
}

TEST(SanitizeLabelValue, SurrogatesRejected) {
  EXPECT_EQ(sanitize_label_value("\xED\xA0\x80"), kFffd + kFffd + kFffd);  // U+D800
  EXPECT_EQ(sanitize_label_value("\xED\xBF\xBF"), kFffd + kFffd + kFffd);  // U+DFFF
  // CESU-8 style pair for U+1F600: every byte is its own maximal subpart.
  std::string six;
  for (int i = 0; i < 6; ++i) six += kFffd;
  EXPECT_EQ(sanitize_label_value("\xED\xA0\xBD\xED\xB8\x80"), six);
  // Neighbours of the surrogate range are fine.
  EXPECT_EQ(sanitize_label_value("\xED\x9F\xBF"), "\xED\x9F\xBF");  // U+D7FF
  EXPECT_EQ(sanitize_label_value("\xEE\x80\x80"), "\xEE\x80\x80");  // U+E000
}

TEST(SanitizeLabelValue, BeyondU10FFFFRejected) {
  EXPECT_EQ(sanitize_label_value("\xF4\x8F\xBF\xBF"), "\xF4\x8F\xBF\xBF");  // U+10FFFF
  EXPECT_EQ(sanitize_label_value("\xF4\x90\x80\x80"), kFffd + kFffd + kFffd + kFffd);
}

TEST(SanitizeLabelValue, FitsExactlyWithoutEllipsis) {
  EXPECT_EQ(sanitize_label_value(std::string(128, 'a')), std::string(128, 'a'));
  EXPECT_EQ(sanitize_label_value("abcd", 4), "abcd");
}

TEST(SanitizeLabelValue, TruncatesWithEllipsisWithinLimit) {
  const std::string out = sanitize_label_value(std::string(1000, 'a'));
  EXPECT_EQ(out.size(), 128u);
  EXPECT_EQ(out, std::string(125, 'a') + kEllipsis);
  EXPECT_EQ(sanitize_label_value("abcde", 4), "a" + kEllipsis);
}

TEST(SanitizeLabelValue, EmojiAtTruncationEdgeIsNotSplit) {
  // 10 bytes limit: 7 bytes of text room. "abcd" + emoji = 8 bytes: the
  // emoji does not fit and must not be cut in half.
  const std::string in = "abcd" + kEmoji + "tail";
  EXPECT_EQ(sanitize_label_value(in, 10), "abcd" + kEllipsis);
  // With 11 bytes, "abcd" + emoji (8) fits the 8 bytes of text room.
  EXPECT_EQ(sanitize_label_value(in, 11), "abcd" + kEmoji + kEllipsis);
  // The emoji ends the input exactly at the limit: no truncation.
  EXPECT_EQ(sanitize_label_value("abcd" + kEmoji, 8), "abcd" + kEmoji);
  // Every limit gives valid UTF-8 within the limit.
  for (size_t max = 0; max <= in.size() + 1; ++max) {
    const std::string out = sanitize_label_value(in, max);
    EXPECT_LE(out.size(), max);
    EXPECT_TRUE(is_valid_utf8(out)) << max;
  }
}

TEST(SanitizeLabelValue, ReplacementsCountTowardTheLimit) {
  // Each invalid byte grows to 3 bytes; the limit applies to the output.
  const std::string out = sanitize_label_value(std::string(100, '\xFF'), 20);
  EXPECT_EQ(out, kFffd + kFffd + kFffd + kFffd + kFffd + kEllipsis);
}

TEST(SanitizeLabelValue, TinyLimits) {
  EXPECT_EQ(sanitize_label_value("abc", 0), "");
  EXPECT_EQ(sanitize_label_value("abc", 2), "ab");  // no room for the ellipsis
  EXPECT_EQ(sanitize_label_value(kEmoji, 2), "");
  EXPECT_EQ(sanitize_label_value("abcd", 3), kEllipsis);
}

TEST(SanitizeLabelValue, AllByteValuesGiveValidUtf8) {
  std::string all;
  for (int i = 0; i < 256; ++i) all += static_cast<char>(i);
  for (int i = 0; i < 256; ++i) all += static_cast<char>(255 - i);
  const std::string out = sanitize_label_value(all, 4096);
  EXPECT_TRUE(is_valid_utf8(out));
  for (char c : out) {
    const auto b = static_cast<unsigned char>(c);
    EXPECT_FALSE(b < 0x20 || b == 0x7F) << int(b);
  }
  EXPECT_EQ(out.find("\xC2\x80"), std::string::npos);
}

}  // namespace
}  // namespace lw
