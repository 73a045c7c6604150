// What this process's address space holds at an address, as /proc/self/maps says it: by the
// PROCMAP_QUERY ioctl (Linux 6.11: one mapping, looked up in the kernel's tree) where the
// kernel has it, else by reading the whole file. A registration asks for the few mappings
// its range crosses; reading the file cost it time in proportion to every mapping the
// process has (each QP and CQ ring is one: 16 K QPs, 16 K lines), about 100 us of a 130 us
// ibv_reg_mr with a few hundred (issue 29).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace vrnic::provider {

struct MapsEntry {
  uint64_t start, end, offset, inode;
  bool readable, writable, shared;
  std::string path;  // as /proc/self/maps shows it: a file, [heap], [stack], /memfd:NAME ...
};

// Every mapping, in address order.
std::vector<MapsEntry> read_maps();

// The mapping that covers addr, or nullopt when none does. Falls back to read_maps() where
// the kernel has no PROCMAP_QUERY (or VRNIC_MAPS_BY_READING is set: the tests' way to take
// that path here).
std::optional<MapsEntry> mapping_at(uint64_t addr);

// After fork(), in the child: the maps file the parent opened describes the parent.
void forget_maps_file_after_fork();

}  // namespace vrnic::provider
