// ibv_* structs to and from the control protocol's layouts (ctl_protocol.h): one definition
// for the provider (ibv_modify_qp, ibv_create_ah) and librdmacm.so.1 (the QP transitions it
// hands to vrnicd with a CM message).
#pragma once

#include <infiniband/verbs.h>

#include <cstring>

#include "vrnic/ctl_protocol.h"

namespace vrnic::ctl {

inline void to_wire(const ibv_ah_attr &a, AddressVector &av) {
  std::memcpy(av.dgid, a.grh.dgid.raw, 16);
  av.flow_label = a.grh.flow_label;
  av.dlid = a.dlid;
  av.sgid_index = a.grh.sgid_index;
  av.hop_limit = a.grh.hop_limit;
  av.traffic_class = a.grh.traffic_class;
  av.sl = a.sl;
  av.port_num = a.port_num;
  av.is_global = a.is_global;
  av.static_rate = a.static_rate;
  av.src_path_bits = a.src_path_bits;
}

inline void from_wire(const AddressVector &av, ibv_ah_attr &a) {
  std::memset(&a, 0, sizeof(a));
  std::memcpy(a.grh.dgid.raw, av.dgid, 16);
  a.grh.flow_label = av.flow_label;
  a.grh.sgid_index = av.sgid_index;
  a.grh.hop_limit = av.hop_limit;
  a.grh.traffic_class = av.traffic_class;
  a.dlid = av.dlid;
  a.sl = av.sl;
  a.port_num = av.port_num;
  a.is_global = av.is_global;
  a.static_rate = av.static_rate;
  a.src_path_bits = av.src_path_bits;
}

// What ibv_modify_qp sends (the fields vrnic keeps; the rest are not on the wire).
inline void to_wire(const ibv_qp_attr &attr, QpAttrWire &w) {
  w = {};
  w.qp_state = attr.qp_state;
  w.cur_qp_state = attr.cur_qp_state;
  w.path_mtu = attr.path_mtu;
  w.qkey = attr.qkey;
  w.rq_psn = attr.rq_psn;
  w.sq_psn = attr.sq_psn;
  w.dest_qp_num = attr.dest_qp_num;
  w.qp_access_flags = uint32_t(attr.qp_access_flags);
  w.pkey_index = attr.pkey_index;
  w.max_rd_atomic = attr.max_rd_atomic;
  w.max_dest_rd_atomic = attr.max_dest_rd_atomic;
  w.min_rnr_timer = attr.min_rnr_timer;
  w.port_num = attr.port_num;
  w.timeout = attr.timeout;
  w.retry_cnt = attr.retry_cnt;
  w.rnr_retry = attr.rnr_retry;
  w.en_sqd_async_notify = attr.en_sqd_async_notify;
  to_wire(attr.ah_attr, w.ah);
}

}  // namespace vrnic::ctl
