// Status <-> errno at vrnicd's protocol boundary (errno_status.h).
#include "errno_status.h"

#include <cerrno>
#include <charconv>
#include <string>

#include "absl/strings/cord.h"

namespace vrnic {
namespace {

constexpr char kErrnoPayload[] = "vrnic.errno";

}  // namespace

absl::Status errno_status(int err, absl::string_view what) {
  absl::Status st = absl::ErrnoToStatus(err, what);
  st.SetPayload(kErrnoPayload, absl::Cord(std::to_string(err)));
  return st;
}

int errno_of(const absl::Status &status) {
  if (status.ok()) return 0;
  if (auto p = status.GetPayload(kErrnoPayload)) {
    std::string digits(*p);
    int err = 0;
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), err);
    if (ec == std::errc() && end == digits.data() + digits.size() && err > 0) return err;
  }
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      return EINVAL;
    case absl::StatusCode::kResourceExhausted:
      return ENOMEM;
    case absl::StatusCode::kPermissionDenied:
      return EPERM;
    case absl::StatusCode::kNotFound:
      return ENOENT;
    case absl::StatusCode::kAlreadyExists:
      return EEXIST;
    case absl::StatusCode::kUnimplemented:
      return EOPNOTSUPP;
    case absl::StatusCode::kFailedPrecondition:
      return EBUSY;
    case absl::StatusCode::kUnavailable:
      return EAGAIN;
    default:
      return EIO;
  }
}

}  // namespace vrnic
