/* SPDX-License-Identifier: Apache-2.0 */
// Makes untrusted strings (process names, executable paths, cgroup and pod
// names) safe to use as Prometheus label values and JSON strings.
// Thread-safety: pure function, no shared state.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace lw {

// Returns `in` as a label value that is:
//  - valid UTF-8: each maximal ill-formed subsequence (Unicode 15, §3.9,
//    "U+FFFD Substitution of Maximal Subparts") becomes one U+FFFD. Overlong
//    forms (C0 80, E0 80 80), UTF-16 surrogates (ED A0 80) and code points
//    above U+10FFFF are ill-formed.
//  - free of control characters: C0 (U+0000..U+001F, tab and newline
//    included), DEL (U+007F) and C1 (U+0080..U+009F) each become '?'. We
//    replace rather than escape because escaping is the serializers' job and
//    a second layer of backslashes would be ambiguous after theirs; '?' is
//    one byte, so the replacement never changes where truncation falls.
//  - at most `max_bytes` bytes long. A longer value is cut at a character
//    boundary and ends in "…" (U+2026, 3 bytes), counted within the limit.
//    With max_bytes < 3 there is no room for the ellipsis and the value is
//    only cut.
// Everything else, '"' and '\\' included, is kept as is: the exposition and
// JSON writers escape those. Work is bounded by max_bytes, not by in.size().
std::string sanitize_label_value(std::string_view in, size_t max_bytes = 128);

}  // namespace lw
