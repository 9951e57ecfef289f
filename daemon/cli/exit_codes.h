#pragma once

// Exit codes of the leakwatch binary (documented in docs/cli.md).
namespace lw::exit_code {
constexpr int kOk = 0;
constexpr int kError = 1;           // runtime failure, message on stderr
constexpr int kUsage = 2;           // bad command line
constexpr int kNoSuchProcess = 3;
constexpr int kPermissionDenied = 4;
constexpr int kUnsupportedKernel = 5;  // no BTF, no uprobes, BPF not loadable
}  // namespace lw::exit_code
