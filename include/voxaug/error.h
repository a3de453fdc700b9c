// voxaug: the one error type and the checking macros used everywhere in the library.
#pragma once

#include <stdexcept>
#include <string>

namespace voxaug {

// Every failure in voxaug is reported as a voxaug::Error carrying where it was raised.
// Argument errors name the argument and what was expected.
class Error : public std::runtime_error {
 public:
  Error(const std::string& what, const char* file, int line)
      : std::runtime_error(what + " [" + file + ":" + std::to_string(line) + "]"),
        file_(file),
        line_(line) {}
  const char* file() const noexcept { return file_; }
  int line() const noexcept { return line_; }

 private:
  const char* file_;
  int line_;
};

namespace detail {
[[noreturn]] inline void raise(const std::string& msg, const char* file, int line) {
  throw Error(msg, file, line);
}
}  // namespace detail
}  // namespace voxaug

// VOXAUG_EXPECTS(cond, message-expression): throws voxaug::Error(message) unless cond holds.
#define VOXAUG_EXPECTS(cond, msg)                                    \
  do {                                                               \
    if (!(cond)) ::voxaug::detail::raise((msg), __FILE__, __LINE__); \
  } while (0)

#define VOXAUG_FAIL(msg) ::voxaug::detail::raise((msg), __FILE__, __LINE__)

namespace voxaug {
// A failed CUDA runtime call or kernel launch; code() is the cudaError_t value.
class CudaError : public Error {
 public:
  CudaError(const std::string& what, int code, const char* file, int line)
      : Error(what, file, line), code_(code) {}
  int code() const noexcept { return code_; }

 private:
  int code_;
};
}  // namespace voxaug
