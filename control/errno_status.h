// vrnicd's one error convention: absl::Status (or StatusOr) inside the daemon, a positive
// errno only at the protocol boundary -- a command handler's return value, which becomes the
// reply's status. errno_status() makes a Status that remembers the errno it came from, so that
// errno_of() tells the client that very errno, not one guessed back from the status code.
#pragma once

#include "absl/strings/string_view.h"

#include "absl/status/status.h"

namespace vrnic {

absl::Status errno_status(int err, absl::string_view what);
// 0 for OK; the errno a Status was made from; else one that fits its code (EIO at worst).
int errno_of(const absl::Status &status);

}  // namespace vrnic
