// SPDX-License-Identifier: Apache-2.0
// The HTTP front's request-head parser (exporter/http/http_request.cc) on
// arbitrary bytes, fed whole and in pieces as a slow client sends them.
// Checks beyond "no crash": the parse of a prefix never reports a complete
// head past the prefix, a complete head's length is within the limit, and
// feeding the bytes in two parts (resuming the scan) ends the same way as
// feeding them at once.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "exporter/http/http_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  lw::HttpLimits limits;
  limits.max_head_bytes = 2048;
  limits.max_headers = 16;
  limits.max_target_bytes = 512;
  lw::HttpRequest whole;
  const lw::HeadParse all = lw::parse_request_head(bytes, limits, &whole);
  if (all.state == lw::HeadParse::State::kComplete) {
    if (all.consumed == 0 || all.consumed > size || all.consumed > limits.max_head_bytes) abort();
    if (whole.path.empty() || whole.path[0] != '/') abort();
    if (whole.headers.size() > limits.max_headers) abort();
  }
  if (all.state == lw::HeadParse::State::kError && (all.status < 400 || all.status > 599)) abort();
  // The same bytes in two pieces, resuming the search where it stopped.
  const size_t cut = size == 0 ? 0 : data[0] % (size + 1);
  lw::HttpRequest first;
  const lw::HeadParse head = lw::parse_request_head(bytes.substr(0, cut), limits, &first);
  if (head.state == lw::HeadParse::State::kComplete && head.consumed > cut) abort();
  if (head.state == lw::HeadParse::State::kIncomplete) {
    lw::HttpRequest second;
    const lw::HeadParse rest = lw::parse_request_head(bytes, limits, &second, cut);
    if (rest.state != all.state) abort();
    if (rest.state == lw::HeadParse::State::kComplete && rest.consumed != all.consumed) abort();
  }
  return 0;
}
