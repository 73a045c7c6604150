// /proc/self/maps, a mapping at a time (process_maps.h).
#include "process_maps.h"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>

namespace vrnic::provider {
namespace {

// Linux's uapi (include/uapi/linux/fs.h since 6.11); Debian 12's headers predate it.
struct ProcmapQuery {
  uint64_t size;
  uint64_t query_flags;
  uint64_t query_addr;
  uint64_t vma_start;
  uint64_t vma_end;
  uint64_t vma_flags;
  uint64_t vma_page_size;
  uint64_t vma_offset;
  uint64_t inode;
  uint32_t dev_major;
  uint32_t dev_minor;
  uint32_t vma_name_size;
  uint32_t build_id_size;
  uint64_t vma_name_addr;
  uint64_t build_id_addr;
};
static_assert(sizeof(ProcmapQuery) == 104);
constexpr unsigned long kProcmapQuery = 0xc0686611;  // _IOWR('f', 17, struct procmap_query)
constexpr uint64_t kVmaReadable = 1, kVmaWritable = 2, kVmaShared = 8;

std::atomic<int> g_maps_fd{-1};
// The kernel said it has no PROCMAP_QUERY; or VRNIC_MAPS_BY_READING is set, so that a test
// takes the older kernels' path on this one.
std::atomic<bool> g_no_query{std::getenv("VRNIC_MAPS_BY_READING") != nullptr};

int maps_fd() {
  int fd = g_maps_fd.load();
  if (fd >= 0) return fd;
  fd = ::open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  int expected = -1;
  if (!g_maps_fd.compare_exchange_strong(expected, fd)) {
    ::close(fd);  // another thread opened it first
    return expected;
  }
  return fd;
}

}  // namespace

std::vector<MapsEntry> read_maps() {
  std::vector<MapsEntry> out;
  FILE *f = std::fopen("/proc/self/maps", "re");
  if (!f) return out;
  char line[4096];
  while (std::fgets(line, sizeof(line), f)) {
    MapsEntry e{};
    char perms[8] = {};
    unsigned long long start, end, offset, inode;
    unsigned dev_major, dev_minor;
    int path_at = 0;
    if (std::sscanf(line, "%llx-%llx %7s %llx %x:%x %llu %n", &start, &end, perms, &offset,
                    &dev_major, &dev_minor, &inode, &path_at) < 7)
      continue;
    e.start = start;
    e.end = end;
    e.offset = offset;
    e.inode = inode;
    e.readable = perms[0] == 'r';
    e.writable = perms[1] == 'w';
    e.shared = perms[3] == 's';
    e.path = line + path_at;
    while (!e.path.empty() && (e.path.back() == '\n' || e.path.back() == ' ')) e.path.pop_back();
    out.push_back(std::move(e));
  }
  std::fclose(f);
  return out;
}

std::optional<MapsEntry> mapping_at(uint64_t addr) {
  const int fd = g_no_query.load() ? -1 : maps_fd();
  if (fd >= 0) {
    char name[4096];
    ProcmapQuery q{};
    q.size = sizeof(q);
    q.query_addr = addr;  // no flags: the mapping covering addr, or ENOENT
    q.vma_name_addr = reinterpret_cast<uint64_t>(name);
    q.vma_name_size = sizeof(name);
    if (::ioctl(fd, kProcmapQuery, &q) == 0) {
      MapsEntry e{q.vma_start, q.vma_end, q.vma_offset, q.inode,
                  bool(q.vma_flags & kVmaReadable), bool(q.vma_flags & kVmaWritable),
                  bool(q.vma_flags & kVmaShared), q.vma_name_size ? std::string(name) : ""};
      return e;
    }
    if (errno == ENOENT) return std::nullopt;
    if (errno == ENOTTY || errno == EINVAL) g_no_query = true;  // an older kernel
  }
  for (MapsEntry &e : read_maps())
    if (e.start <= addr && addr < e.end) return std::move(e);
  return std::nullopt;
}

void forget_maps_file_after_fork() {
  const int fd = g_maps_fd.exchange(-1);
  if (fd >= 0) ::close(fd);
}

}  // namespace vrnic::provider
