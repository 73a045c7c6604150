// CPU lists in Linux's list format ("0-3,8"), parsed and printed (cpu_list.h).
#include "cpu_list.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace vrnic {

absl::StatusOr<std::vector<int>> parse_cpu_list(const std::string &text, const cpu_set_t &allowed) {
  std::vector<int> cpus;
  auto bad = [&](const std::string &why) {
    return absl::InvalidArgumentError("'" + text + "': " + why);
  };
  if (text.empty()) return bad("no CPU given");
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    std::pair<absl::string_view, absl::string_view> range =
        absl::StrSplit(item, absl::MaxSplits('-', 1));
    unsigned first, last;
    const bool is_range = item.find('-') != absl::string_view::npos;
    if (!absl::SimpleAtoi(range.first, &first) ||
        !absl::SimpleAtoi(is_range ? range.second : range.first, &last) || last < first)
      return bad("want CPU numbers and ranges, e.g. 0,2-3");
    for (unsigned cpu = first; cpu <= last; cpu++) {
      if (cpu >= CPU_SETSIZE || !CPU_ISSET(cpu, &allowed))
        return bad("CPU " + std::to_string(cpu) + " is not one vrnicd may run on (" +
                   format_cpu_set(allowed) + ")");
      for (int seen : cpus)
        if (seen == int(cpu)) return bad("CPU " + std::to_string(cpu) + " given twice");
      cpus.push_back(int(cpu));
    }
  }
  return cpus;
}

std::string format_cpu_set(const cpu_set_t &set) {
  std::string out;
  for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
    if (!CPU_ISSET(cpu, &set)) continue;
    int last = cpu;
    while (last + 1 < CPU_SETSIZE && CPU_ISSET(last + 1, &set)) last++;
    if (!out.empty()) out += ',';
    out += std::to_string(cpu);
    if (last > cpu) out += '-' + std::to_string(last);
    cpu = last;
  }
  return out;
}

}  // namespace vrnic
