// Moving bytes between packets and a work request's scatter/gather list, with the local-key
// checks a NIC makes on every access (key, PD, bounds, access rights).
#pragma once

#include <cstdint>

#include "device.h"
#include "vrnic/shm_layout.h"

namespace vrnic {

struct SgeCursor {
  uint32_t index = 0;
  uint32_t offset = 0;
};

struct SgeList {
  const shm::Sge *sge;
  uint32_t count;
  uint32_t pd;
};

// The gather list of a send WQE where it lies, in the client's ring: its count is read once
// and clamped to the WQE's kMaxSge entries, every time. The client may rewrite a WQE after
// vrnicd has checked it, and a retransmission reads it again: a count past the array read
// past the ring (issue 17, row 5). The entries themselves are checked at each use.
inline SgeList send_sge_list(const shm::SendWqe &wqe, uint32_t pd) {
  uint32_t n = reinterpret_cast<const volatile uint8_t &>(wqe.num_sge);
  return {wqe.sge, n < shm::kMaxSge ? n : shm::kMaxSge, pd};
}

// Positions a cursor `offset` bytes into the list (skipping empty entries).
SgeCursor sge_seek(const SgeList &list, uint64_t offset);

// Each returns 0 or the ibv_wc_status of the failure: IBV_WC_LOC_PROT_ERR for a bad key or
// missing right, IBV_WC_LOC_LEN_ERR when the list is too short.
int sge_scatter(const Device &dev, const SgeList &list, SgeCursor &cur, const uint8_t *src,
                uint32_t len);
int sge_gather(const Device &dev, const SgeList &list, SgeCursor &cur, uint8_t *dst, uint32_t len);
// Zero copy: a pointer to the next len bytes if they sit in one local piece of one entry, the
// cursor moved past them; nullptr (the cursor as it was) otherwise.
const uint8_t *sge_reference(const Device &dev, const SgeList &list, SgeCursor &cur, uint32_t len);
// Checks every entry up front; `need_write` for lists the NIC will write into.
int sge_validate(const Device &dev, const SgeList &list, bool need_write, uint64_t *total);

}  // namespace vrnic
