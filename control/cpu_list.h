// CPU lists as Linux writes them (cpuset(7) "list format", taskset -c): "0", "0,2", "0-3,8".
#pragma once

#include <sched.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace vrnic {

// The CPUs of `text`, in the order given (a worker takes the next one); each must be in
// `allowed` (the process's affinity, sched_getaffinity), and none twice.
absl::StatusOr<std::vector<int>> parse_cpu_list(const std::string &text, const cpu_set_t &allowed);

// `set` in list format, for messages.
std::string format_cpu_set(const cpu_set_t &set);

}  // namespace vrnic
