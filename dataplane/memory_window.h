// A memory window: a remotely accessible slice of a memory region with its own rkey and
// rights, bound and unbound through the send queue (IB spec 10.6.7). Type 1 windows belong
// to a PD; type 2 windows are also tied to the QP that bound them.
#pragma once

#include <cstdint>

#include "vrnic/object_keys.h"

namespace vrnic {

struct MemoryWindow {
  uint32_t handle = 0;
  uint32_t key = 0;  // current rkey: kMwKeyBit | handle << 8 | generation byte
  uint32_t pd = 0;
  uint32_t session = 0;
  uint32_t payer = 0;  // the uid charged for it (control/session.h: Session::pay)
  uint8_t type = 1;  // enum ibv_mw_type
  bool bound = false;
  uint32_t mr_key = 0;  // the region it exposes
  uint64_t va = 0;
  uint64_t length = 0;
  uint32_t access = 0;  // remote rights granted through the window
  uint32_t qpn = 0;     // type 2: the QP it is bound to
};

}  // namespace vrnic
