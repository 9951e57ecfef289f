// SPDX-License-Identifier: Apache-2.0
// What `leakwatch top` prints (docs/cli.md): a table per snapshot, fitted to
// the terminal's width, or one JSON object per line. Reads only the view
// (view/process_view.h) and core/.
// Thread-safety: writes to stdout; call from one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "view/process_view.h"

namespace lw {

// "1.5 MiB".
std::string human_bytes(uint64_t bytes);
// "45s", "1m40s", "2m", "2h05m", "3h".
std::string human_duration(double seconds);

struct TextOptions {
  size_t width = 80;  // no line of the table is longer
};

// Prints one snapshot (a table, or one JSON line) and flushes stdout.
// Returns false when stdout could not be written; errno then says why
// (EPIPE: the reader went away).
bool print_snapshot(const ProcessSnapshot& snap, bool json, const TextOptions& text = {});

// The text view's first line, printed once every probe is attached (the
// first table follows one interval later). Same return as print_snapshot.
bool print_attached(const ProcessSnapshot& snap, double interval_s, const TextOptions& text = {});

// Fits `s` into `width` columns: unchanged when it fits, else cut with
// "..." at the end (or only cut, below 4 columns).
std::string clip(const std::string& s, size_t width);

}  // namespace lw
