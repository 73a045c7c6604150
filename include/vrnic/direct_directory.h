// A user's directory for the same-host direct path between processes (issue 30): what a
// posting thread of one process checks of a peer QP and a region of another process of the
// same user before it writes or reads that region itself, and the poster cells by which a
// deregistering process waits for the accesses still in flight.
//
// vrnicd keeps one directory per user, shared with that user's sessions only (a process
// gets no access it did not have: it could already read its own user's memory). Two memfds:
// the entries, written by vrnicd alone and read-only to clients; the poster cells, written
// by clients (a cell is odd while its thread is in a section) and reset by vrnicd when the
// session that claimed it closes, so that a killed poster holds no one's deregistration.
// vrnicd never reads a cell: nothing a client writes there can stop it.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>

#include "vrnic/object_keys.h"

namespace vrnic::shm {

// One entry, read without locks: a sequence lock (odd while its single writer changes it).
template <typename T>
struct Published {
  static constexpr size_t kWords = (sizeof(T) + 7) / 8;
  std::atomic<uint64_t> version;
  std::atomic<uint64_t> words[kWords];

  // Only one writer at a time (vrnicd: the object's worker, or the control thread while no
  // worker has the object). The last store is seq_cst: a poster whose section began after it
  // cannot see the old value (the revocation argument, direct_path.cpp).
  void write(const T &value) {
    const uint64_t v = version.load(std::memory_order_relaxed);
    version.store(v + 1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    uint64_t w[kWords] = {};
    std::memcpy(w, &value, sizeof(T));
    for (size_t i = 0; i < kWords; i++) words[i].store(w[i], std::memory_order_relaxed);
    version.store(v + 2, std::memory_order_seq_cst);
  }
  // A consistent copy and its version, or false while it changes.
  bool read(T *out, uint64_t *at) const {
    const uint64_t v = version.load(std::memory_order_seq_cst);
    if (v & 1) return false;
    uint64_t w[kWords];
    for (size_t i = 0; i < kWords; i++) w[i] = words[i].load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (version.load(std::memory_order_relaxed) != v) return false;
    std::memcpy(out, w, sizeof(T));
    *at = v;
    return true;
  }
};

// An RC QP as a direct peer (qpn 0: no QP).
struct DirectoryQp {
  uint32_t qpn;
  uint32_t state;  // enum ibv_qp_state
  uint32_t dest_qpn;
  uint32_t pd;      // vrnicd's handle: compared with a region's
  uint32_t access;  // qp_access_flags
  uint32_t reserved;
};

// A region the direct path may reach in its owner's memfd (key 0: none): the part of it in
// its one memfd piece (iova and length are that part's; the partial pages at its ends, which
// vrnicd reaches through the owner's /proc/self/mem, are left to the worker path, as are
// regions over several memfds).
struct DirectoryMr {
  uint32_t key;  // lkey == rkey
  uint32_t pd;
  uint32_t access;
  uint32_t pid;  // the owner, as vrnicd saw it connect (SO_PEERCRED)
  uint32_t fd;   // the memfd's number in the owner (/proc/<pid>/fd/<fd>)
  uint32_t reserved;
  uint64_t inode;      // the memfd vrnicd was given: what the poster opens must be the same
  uint64_t device;     // file (both: an inode number alone is unique on one filesystem only)
  uint64_t fd_offset;  // of the region's first byte in the memfd
  uint64_t iova;
  uint64_t length;
};

// By key handle: vrnicd's MR table (Device::mrs) has 1 << 20 slots, handles 1 to 1 << 20.
inline constexpr uint32_t kDirectoryMrs = (1u << 20) + 1;
inline constexpr uint32_t kDirectoryQps = 1u << kQpnIndexBits;

struct Directory {
  Published<DirectoryQp> qps[kDirectoryQps];  // by qpn_index
  Published<DirectoryMr> mrs[kDirectoryMrs];  // by key_handle
};

inline constexpr uint32_t kPosterCells = 1024;
struct alignas(64) PosterCell {
  std::atomic<uint64_t> seq;    // odd while its thread is in a direct section
  std::atomic<uint32_t> owner;  // the session id of the claimer, 0 when free
};
struct PosterCells {
  PosterCell cells[kPosterCells];
};

}  // namespace vrnic::shm
