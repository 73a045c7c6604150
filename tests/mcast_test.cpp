// Multicast on one vrnicd (issue 32 item 6): ibv_attach_mcast and ibv_detach_mcast and their
// errors, and a UD datagram to a group (QPN 0xFFFFFF) reaching every attached QP whose Q_Key
// matches, byte for byte after the GRH, and no other.
#include <catch2/catch.hpp>
#include <cerrno>
#include <cstring>
#include <vector>

#include "verbs_fixture.h"

using namespace vt;

namespace {

constexpr uint32_t kQkey = 0x01234567, kMulticastQpn = 0xffffff;
constexpr size_t kGrh = 40, kMsg = 300;

struct UdQp {
  CqPtr cq;
  QpPtr qp;
};

UdQp make_ud(Device &d, ibv_pd *pd, uint32_t qkey = kQkey) {
  UdQp u;
  u.cq.reset(ibv_create_cq(d.ctx.get(), 64, nullptr, nullptr, 0));
  REQUIRE(u.cq);
  ibv_qp_init_attr a{};
  a.send_cq = a.recv_cq = u.cq.get();
  a.qp_type = IBV_QPT_UD;
  a.cap = {16, 16, 1, 1, 0};
  u.qp.reset(ibv_create_qp(pd, &a));
  REQUIRE(u.qp);
  ibv_qp_attr at{};
  at.qp_state = IBV_QPS_INIT;
  at.port_num = d.port_num;
  at.qkey = qkey;
  REQUIRE(ibv_modify_qp(u.qp.get(), &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                            IBV_QP_QKEY) == 0);
  at.qp_state = IBV_QPS_RTR;
  REQUIRE(ibv_modify_qp(u.qp.get(), &at, IBV_QP_STATE) == 0);
  at.qp_state = IBV_QPS_RTS;
  at.sq_psn = 1;
  REQUIRE(ibv_modify_qp(u.qp.get(), &at, IBV_QP_STATE | IBV_QP_SQ_PSN) == 0);
  return u;
}

ibv_gid group_gid(uint8_t last) {  // 230.1.2.<last>, IPv4-mapped, as rdma_cm makes it
  ibv_gid g{};
  g.raw[10] = g.raw[11] = 0xff;
  g.raw[12] = 230;
  g.raw[13] = 1;
  g.raw[14] = 2;
  g.raw[15] = last;
  return g;
}

void post_recv(UdQp &u, Region &buf, uint64_t wr_id) {
  ibv_sge sge = make_sge(buf.payload(), kGrh + kMsg, buf.lkey());
  ibv_recv_wr wr = make_recv_wr(wr_id, &sge, 1);
  vt::post_recv(u.qp.get(), &wr);
}

}  // namespace

TEST_CASE("ibv_attach_mcast/detach_mcast: limits reported; UD only, multicast GIDs only",
          "[mcast]") {
  auto dev = open_device();
  CHECK(dev->attr.max_mcast_grp > 0);
  CHECK(dev->attr.max_mcast_qp_attach > 0);
  CHECK(dev->attr.max_total_mcast_qp_attach >= dev->attr.max_mcast_qp_attach);
  PdPtr pd(ibv_alloc_pd(dev->ctx.get()));
  REQUIRE(pd);
  UdQp ud = make_ud(*dev, pd.get());
  ibv_gid g = group_gid(1);
  CHECK(ibv_attach_mcast(ud.qp.get(), &g, 0) == 0);
  CHECK(ibv_attach_mcast(ud.qp.get(), &g, 0) == 0);  // again: still one membership
  CHECK(ibv_detach_mcast(ud.qp.get(), &g, 0) == 0);
  CHECK(ibv_detach_mcast(ud.qp.get(), &g, 0) == EINVAL);  // not attached
  ibv_gid unicast = dev->gid;
  CHECK(ibv_attach_mcast(ud.qp.get(), &unicast, 0) == EINVAL);
  ibv_gid ipv6_group{};
  ipv6_group.raw[0] = 0xff;
  ipv6_group.raw[1] = 0x0e;
  ipv6_group.raw[15] = 7;
  CHECK(ibv_attach_mcast(ud.qp.get(), &ipv6_group, 0) == 0);
  Pair rc;  // an RC QP cannot join a group
  CHECK(ibv_attach_mcast(rc.a.qp(), &g, 0) == EINVAL);
  // A QP destroyed while attached leaves its groups.
  ud.qp.reset();
}

namespace {
long long user_mcast() {
  std::string err;
  auto stats = read_vrnic_stats(&err);
  INFO(err);
  REQUIRE(stats);
  return (*stats)["user_mcast"];
}
}  // namespace

TEST_CASE("attachments count against the user's mcast quota until detached or destroyed",
          "[mcast]") {
  auto dev = open_device();
  PdPtr pd(ibv_alloc_pd(dev->ctx.get()));
  REQUIRE(pd);
  const long long before = user_mcast();
  {
    UdQp a = make_ud(*dev, pd.get()), b = make_ud(*dev, pd.get());
    const ibv_gid g1 = group_gid(3), g2 = group_gid(4);
    REQUIRE(ibv_attach_mcast(a.qp.get(), &g1, 0) == 0);
    REQUIRE(ibv_attach_mcast(a.qp.get(), &g2, 0) == 0);
    REQUIRE(ibv_attach_mcast(b.qp.get(), &g1, 0) == 0);
    CHECK(user_mcast() == before + 3);
    REQUIRE(ibv_detach_mcast(a.qp.get(), &g2, 0) == 0);
    CHECK(user_mcast() == before + 2);
  }  // both QPs destroyed while attached
  CHECK(user_mcast() == before);
}

TEST_CASE("a datagram to a group reaches each attached QP with its Q_Key, and no other",
          "[mcast]") {
  auto dev = open_device();
  PdPtr pd(ibv_alloc_pd(dev->ctx.get()));
  REQUIRE(pd);
  UdQp sender = make_ud(*dev, pd.get());
  UdQp member1 = make_ud(*dev, pd.get()), member2 = make_ud(*dev, pd.get());
  UdQp outsider = make_ud(*dev, pd.get());
  UdQp other_qkey = make_ud(*dev, pd.get(), kQkey + 1);
  const ibv_gid g = group_gid(2);
  for (UdQp *m : {&member1, &member2, &other_qkey}) REQUIRE(ibv_attach_mcast(m->qp.get(), &g, 0) == 0);
  std::vector<std::unique_ptr<Region>> bufs;
  std::vector<UdQp *> receivers = {&member1, &member2, &outsider, &other_qkey};
  for (size_t i = 0; i < receivers.size(); i++) {
    bufs.push_back(std::make_unique<Region>(pd.get(), kGrh + kMsg, seed_for("mc rx", i)));
    post_recv(*receivers[i], *bufs[i], 0x500 + i);
  }
  ibv_ah_attr ah_attr{};
  ah_attr.is_global = 1;
  ah_attr.grh.dgid = g;
  ah_attr.grh.sgid_index = uint8_t(dev->gid_index);
  ah_attr.grh.hop_limit = 1;
  ah_attr.port_num = dev->port_num;
  ibv_ah *ah = ibv_create_ah(pd.get(), &ah_attr);
  REQUIRE(ah);
  Region msg(pd.get(), kMsg, seed_for("mc msg"));
  auto send = [&](uint64_t wr_id) {
    ibv_sge sge = make_sge(msg.payload(), kMsg, msg.lkey());
    ibv_send_wr wr = make_send_wr(wr_id, IBV_WR_SEND, &sge, 1);
    wr.wr.ud.ah = ah;
    wr.wr.ud.remote_qpn = kMulticastQpn;
    wr.wr.ud.remote_qkey = kQkey;
    vt::post_send(sender.qp.get(), &wr);
    check_wc(poll_one(sender.cq.get(), "multicast send"),
             want("multicast send", wr_id, sender.qp->qp_num));
  };
  send(1);
  for (size_t i = 0; i < 2; i++) {
    const ibv_wc wc = poll_one(receivers[i]->cq.get(), "member receive");
    CHECK(wc.status == IBV_WC_SUCCESS);
    CHECK(wc.wr_id == 0x500 + i);
    CHECK(wc.byte_len == kGrh + kMsg);
    CHECK(wc.src_qp == sender.qp->qp_num);
    VT_REQUIRE_BYTES("the datagram after the GRH", bufs[i]->payload() + kGrh, msg.payload(), kMsg);
  }
  require_no_completion(outsider.cq.get(), Ms{200}, "a QP not attached");
  require_no_completion(other_qkey.cq.get(), Ms{0}, "an attached QP of another Q_Key");
  // Detached: member2 hears no more; member1 does.
  REQUIRE(ibv_detach_mcast(member2.qp.get(), &g, 0) == 0);
  post_recv(member1, *bufs[0], 0x600);
  post_recv(member2, *bufs[1], 0x601);
  send(2);
  CHECK(poll_one(member1.cq.get(), "member1 again").wr_id == 0x600);
  require_no_completion(member2.cq.get(), Ms{200}, "member2 after detaching");
  CHECK(ibv_destroy_ah(ah) == 0);
}
