/* SPDX-License-Identifier: Apache-2.0 */
// Error convention (docs/architecture.md, "Errors"):
//  - Recoverable errors travel as return values: Result<T> holds a T or an
//    Error (an errno-style code plus a message written for the operator).
//  - Exceptions are used only at startup and for config errors.
//  - Errors become exit codes only in main().
#pragma once

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>
#include <variant>

namespace lw {

struct Error {
  int code = 0;         // errno value when one applies, else 0
  std::string message;  // what failed and on what, e.g. "open /proc/42/maps: No such process"
};

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}            // NOLINT: implicit by design
  Result(Error error) : v_(std::move(error)) {}        // NOLINT
  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  const Error& error() const { return std::get<1>(v_); }

 private:
  std::variant<T, Error> v_;
};

struct Unit {};
using Status = Result<Unit>;
inline Status ok_status() { return Unit{}; }

// Error from errno, with context: errno_error("open " + path).
inline Error errno_error(const std::string& what, int err = errno) {
  std::string msg = what;
  msg += ": ";
  char buf[128];
  msg += strerror_r(err, buf, sizeof(buf));
  return Error{err, std::move(msg)};
}

}  // namespace lw
