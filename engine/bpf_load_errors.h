// SPDX-License-Identifier: Apache-2.0
// What leakwatch says when its BPF object does not load: libbpf's messages
// (to the debug log only), and the error a user reads, which names a
// missing capability, a kernel without uprobes or BTF, or the verifier's
// own reason when it refused a program (a verifier's EACCES is not a
// permission). Thread-safety: libbpf_log may be called from any thread.
#ifndef LW_ENGINE_BPF_LOAD_ERRORS_H_
#define LW_ENGINE_BPF_LOAD_ERRORS_H_

#include <bpf/libbpf.h>

#include <cstdarg>

#include "core/platform/result.h"

namespace lw {

// libbpf's print callback (libbpf_set_print).
int libbpf_log(enum libbpf_print_level level, const char* fmt, va_list args);
// The error for a failed load with errno `err`.
Error load_error(int err);

}  // namespace lw

#endif  // LW_ENGINE_BPF_LOAD_ERRORS_H_
