// The test tools' device: the first one libibverbs lists (vrnic0 of the vrnicd at
// VRNIC_SOCKET), opened. nullptr, with *why set, when there is none or it does not open.
#pragma once

#include <infiniband/verbs.h>

inline ibv_context *open_first_device(const char **why) {
  int n = 0;
  ibv_device **list = ibv_get_device_list(&n);
  if (!list || n < 1) {
    if (list) ibv_free_device_list(list);
    *why = "no device";
    return nullptr;
  }
  ibv_context *ctx = ibv_open_device(list[0]);
  ibv_free_device_list(list);
  if (!ctx) *why = "ibv_open_device";
  return ctx;
}
