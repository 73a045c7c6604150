// Packets as wire ports take them in and hand them out: the shape check of a received UDP
// payload, the pad count, the pool's release hook (a DPDK mbuf held by a received packet),
// and the receive-path fault stage every wire port shares.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <vector>

#include "dataplane/packet.h"
#include "dataplane/sge_io.h"
#include "dataplane/rx_fault_stage.h"
#include "vrnic/cm_wire.h"
#include "vrnic/wire.h"

using vrnic::Packet;
using vrnic::PacketPool;
using vrnic::RxFaultStage;
using vrnic::RxFrame;

namespace {

constexpr uint8_t kRcSendOnly = 0x04;     // BTH only
constexpr uint8_t kRcWriteOnly = 0x0a;    // BTH + RETH (16)
constexpr uint8_t kRcAcknowledge = 0x11;  // BTH + AETH (4)

// BTH (opcode, pad) + extension bytes + payload + pad + a 4-byte ICRC field.
std::vector<uint8_t> frame(uint8_t opcode, size_t ext, size_t payload, uint8_t pad) {
  std::vector<uint8_t> f(12 + ext + payload + pad + 4, 0xab);
  vrnic::wire::Bth bth;
  bth.set(opcode, false, pad, 0xffff, 0x11, false, 7);
  std::memcpy(f.data(), bth.b, 12);
  return f;
}

}  // namespace

TEST_CASE("Packet::parse takes a well-formed UDP payload apart", "[packet]") {
  PacketPool pool(1);
  Packet *p = pool.alloc();
  std::vector<uint8_t> f = frame(kRcWriteOnly, 16, 37, 3);
  REQUIRE(p->parse(f.data(), uint32_t(f.size())));
  CHECK(p->header_len == 28);
  CHECK(p->payload == f.data() + 28);
  CHECK(p->payload_len == 37);
  CHECK(p->bth().psn() == 7);
  pool.free(p);
}

TEST_CASE("Packet::parse refuses what is not shaped like a RoCE packet", "[packet]") {
  PacketPool pool(1);
  Packet *p = pool.alloc();
  std::vector<uint8_t> ok = frame(kRcAcknowledge, 4, 0, 0);
  REQUIRE(p->parse(ok.data(), uint32_t(ok.size())));
  CHECK_FALSE(p->parse(ok.data(), 15));                       // shorter than BTH + ICRC
  CHECK_FALSE(p->parse(ok.data(), uint32_t(ok.size() - 1)));  // AETH cut short
  std::vector<uint8_t> f = ok;
  f[0] = 0x1f;  // a reserved RC opcode
  CHECK_FALSE(p->parse(f.data(), uint32_t(f.size())));
  f = ok;
  f[1] |= 0x01;  // transport version 1
  CHECK_FALSE(p->parse(f.data(), uint32_t(f.size())));
  f = frame(kRcSendOnly, 0, 0, 3);  // pad 3 with no room for it
  CHECK_FALSE(p->parse(f.data(), uint32_t(f.size() - 3)));
  pool.free(p);
}

TEST_CASE("Packet::set_pad writes the pad count a payload needs", "[packet]") {
  PacketPool pool(1);
  Packet *p = pool.alloc();
  std::vector<uint8_t> f = frame(kRcSendOnly, 0, 0, 0);
  std::memcpy(p->header, f.data(), 12);
  p->header_len = 12;
  for (uint32_t len : {0u, 1u, 2u, 3u, 4u, 37u, 1024u}) {
    p->payload_len = len;
    const uint8_t pad = p->set_pad();
    CHECK((len + pad) % 4 == 0);
    CHECK(pad < 4);
    CHECK(p->bth().pad_count() == pad);
    CHECK(p->bth().opcode() == kRcSendOnly);
    CHECK(p->bth().mig_req());  // the other bits of the byte stay
  }
  pool.free(p);
}

TEST_CASE("PacketPool::free calls a packet's release hook once", "[packet]") {
  PacketPool pool(2);
  static int released = 0;
  released = 0;
  Packet *p = pool.alloc();
  p->release = [](Packet *pkt) {
    released++;
    CHECK(pkt->release == nullptr);  // cleared before the call
  };
  pool.free(p);
  CHECK(released == 1);
  Packet *q = pool.alloc();
  pool.free(q);  // the same packet again, without a hook now
  CHECK(released == 1);
  CHECK(pool.available() == 2);
}

namespace {

struct Sink {
  std::vector<uint8_t> seen;  // first byte of each delivered frame
  PacketPool *pool;
  static void deliver(void *self, RxFrame f) {
    auto *s = static_cast<Sink *>(self);
    s->seen.push_back(f.data[0]);
    s->pool->free(f.pkt);
  }
};

void push_frames(PacketPool &pool, RxFaultStage &stage, int n) {
  for (int i = 0; i < n; i++) {
    Packet *p = pool.alloc();
    REQUIRE(p != nullptr);
    p->bounce[0] = uint8_t(i);
    stage.push({p, p->bounce, 64});
  }
}

vrnic::FaultConfig faults(const char *spec) {
  auto cfg = vrnic::FaultConfig::parse(spec);
  REQUIRE(cfg.ok());
  return *cfg;
}

}  // namespace

TEST_CASE("RxFaultStage: loss drops frames and returns their packets", "[faults]") {
  PacketPool pool(256);
  Sink sink{{}, &pool};
  RxFaultStage stage(pool, &Sink::deliver, &sink);
  stage.configure(faults("loss=50,seed=3"));
  push_frames(pool, stage, 200);
  const auto dropped = stage.counters()->dropped;
  CHECK(dropped > 50);
  CHECK(dropped < 150);
  CHECK(sink.seen.size() == 200 - dropped);
  CHECK(pool.available() == 256);
}

TEST_CASE("RxFaultStage: duplicates are copies delivered beside the original", "[faults]") {
  PacketPool pool(64);
  Sink sink{{}, &pool};
  RxFaultStage stage(pool, &Sink::deliver, &sink);
  stage.configure(faults("dup=100"));
  push_frames(pool, stage, 10);
  REQUIRE(sink.seen.size() == 20);
  for (size_t i = 0; i < 10; i++) {
    CHECK(sink.seen[2 * i] == i);
    CHECK(sink.seen[2 * i + 1] == i);
  }
  CHECK(pool.available() == 64);
}

TEST_CASE("RxFaultStage: a reordered frame comes after the next one; off flushes", "[faults]") {
  PacketPool pool(64);
  Sink sink{{}, &pool};
  RxFaultStage stage(pool, &Sink::deliver, &sink);
  stage.configure(faults("reorder=100"));
  push_frames(pool, stage, 3);  // 0 held, 1 then 0, 2 held
  CHECK(sink.seen == std::vector<uint8_t>{1, 0});
  stage.configure(vrnic::FaultConfig{});  // off: the held frame is delivered now
  CHECK_FALSE(stage.active());
  CHECK(sink.seen == std::vector<uint8_t>{1, 0, 2});
  CHECK(pool.available() == 64);
}

TEST_CASE("RxFaultStage: hold_op holds back every frame of that opcode, only those", "[faults]") {
  PacketPool pool(64);
  Sink sink{{}, &pool};
  RxFaultStage stage(pool, &Sink::deliver, &sink);
  stage.configure(faults("hold_op=1"));
  push_frames(pool, stage, 4);  // frame i's first byte (its BTH opcode) is i
  CHECK(sink.seen == std::vector<uint8_t>{0, 2, 1, 3});
  CHECK(stage.counters()->reordered == 1);
  CHECK(faults("hold_op=0").hold_opcode == 0);
  CHECK(faults("loss=1").hold_opcode == -1);
  for (const char *bad : {"hold_op=256", "hold_op=1.5", "hold_op=-1", "hold_op=x"}) {
    INFO(bad);
    CHECK_FALSE(vrnic::FaultConfig::parse(bad).ok());
  }
  CHECK(pool.available() == 64);
}

// A UD SEND_ONLY to `qpn` carrying a CM MAD of `attr` and transaction `tid`; its first byte
// (the BTH opcode, 0x64) is what Sink records, so the MAD's tid's low byte is put in its PSN.
void push_mad(PacketPool &pool, RxFaultStage &stage, uint32_t qpn, vrnic::cm::Attr attr,
              uint64_t tid) {
  Packet *p = pool.alloc();
  REQUIRE(p != nullptr);
  auto *bth = reinterpret_cast<vrnic::wire::Bth *>(p->bounce);
  bth->set(0x64, false, 0, 0xffff, qpn, false, uint32_t(tid));
  auto *deth = reinterpret_cast<vrnic::wire::Deth *>(p->bounce + vrnic::wire::Bth::kSize);
  deth->set(vrnic::cm::kGsiQkey, 1);
  vrnic::cm::Mad mad;
  mad.init(attr, tid);
  std::memcpy(p->bounce + vrnic::wire::Bth::kSize + vrnic::wire::Deth::kSize, mad.bytes.data(),
              mad.bytes.size());
  stage.push({p, p->bounce, uint32_t(20 + mad.bytes.size())});
}

TEST_CASE("RxFaultStage: drop_mad drops each transaction's first copy of that MAD, only it",
          "[faults]") {
  using vrnic::cm::Attr;
  PacketPool pool(64);
  std::vector<uint32_t> psns;
  struct PsnSink {
    std::vector<uint32_t> *psns;
    PacketPool *pool;
    static void deliver(void *self, RxFrame f) {
      auto *s = static_cast<PsnSink *>(self);
      s->psns->push_back(reinterpret_cast<const vrnic::wire::Bth *>(f.data)->psn());
      s->pool->free(f.pkt);
    }
  } sink{&psns, &pool};
  RxFaultStage stage(pool, &PsnSink::deliver, &sink);
  stage.configure(faults("drop_mad=21"));
  push_mad(pool, stage, 1, Attr::kDreq, 7);   // dropped
  push_mad(pool, stage, 1, Attr::kDreq, 7);   // sent again: passes
  push_mad(pool, stage, 1, Attr::kDrep, 8);   // another attribute: passes
  push_mad(pool, stage, 9, Attr::kDreq, 9);   // not to QP1: passes
  push_mad(pool, stage, 1, Attr::kDreq, 10);  // a new transaction: dropped
  push_mad(pool, stage, 1, Attr::kDreq, 7);   // the first one's third copy: passes
  CHECK(psns == std::vector<uint32_t>{7, 8, 9, 7});
  CHECK(stage.counters()->dropped == 2);
  CHECK(faults("drop_mad=21").to_string().find("drop_mad=21") != std::string::npos);
  for (const char *bad : {"drop_mad=65536", "drop_mad=1.5", "drop_mad=x"}) {
    INFO(bad);
    CHECK_FALSE(vrnic::FaultConfig::parse(bad).ok());
  }
  CHECK(pool.available() == 64);
}

TEST_CASE("RxFaultStage: delayed frames wait their time; dropped ones return at teardown",
          "[faults]") {
  PacketPool pool(64);
  Sink sink{{}, &pool};
  {
    RxFaultStage stage(pool, &Sink::deliver, &sink);
    stage.configure(faults("delay_us=1000000"));
    push_frames(pool, stage, 5);
    stage.release_due();
    CHECK(sink.seen.empty());
    CHECK(stage.counters()->delayed == 5);
  }
  CHECK(sink.seen.empty());
  CHECK(pool.available() == 64);  // the destructor gave the held packets back
}

// A send WQE lies in the client's ring, which the client may rewrite after vrnicd checked it:
// whatever count it holds, the gather list vrnicd walks stays within the WQE's own entries.
TEST_CASE("send_sge_list keeps a send WQE's gather list within its kMaxSge entries", "[packet]") {
  vrnic::shm::SendWqe wqe{};
  for (uint32_t n : {0u, 1u, 16u, 17u, 255u}) {
    wqe.num_sge = uint8_t(n);
    vrnic::SgeList list = vrnic::send_sge_list(wqe, 7);
    CHECK(list.count == std::min<uint32_t>(n, vrnic::shm::kMaxSge));
    CHECK(list.sge == wqe.sge);
    CHECK(list.pd == 7);
  }
}

// Grace periods (Worker::pass_quiescent_point) wait for the packets the transport built
// before a moment to come back, however they come back: out of order, or never built at all.
TEST_CASE("PacketPool counts the transport's packets by epoch; received packets do not count",
          "[packet]") {
  PacketPool pool(8);
  CHECK(pool.previous_epoch_done());
  Packet *old1 = pool.alloc_counted();
  Packet *old2 = pool.alloc_counted();
  Packet *received = pool.alloc();  // a port's: holds no client memory
  pool.new_epoch();
  Packet *fresh = pool.alloc_counted();
  CHECK_FALSE(pool.previous_epoch_done());
  pool.free(old2);  // back out of order
  CHECK_FALSE(pool.previous_epoch_done());
  pool.free(fresh);  // a packet of the new epoch does not end the old one
  CHECK_FALSE(pool.previous_epoch_done());
  pool.free(old1);
  CHECK(pool.previous_epoch_done());
  // The next epoch: what is out of the current one now holds it up, and nothing else.
  Packet *held = pool.alloc_counted();
  pool.new_epoch();
  CHECK_FALSE(pool.previous_epoch_done());
  pool.free(held);
  CHECK(pool.previous_epoch_done());
  CHECK(received->epoch == 0);
  pool.free(received);
  CHECK(pool.previous_epoch_done());
  CHECK(pool.available() == 8);
}

TEST_CASE("A packet that holds only its own bytes no longer holds up its epoch", "[packet]") {
  PacketPool pool(2);
  Packet *waiting = pool.alloc_counted();  // say, bounced and held for a peer's address
  pool.new_epoch();
  CHECK_FALSE(pool.previous_epoch_done());
  pool.settled(waiting);
  CHECK(pool.previous_epoch_done());
  pool.free(waiting);  // later: counted once only
  CHECK(pool.previous_epoch_done());
  pool.new_epoch();
  CHECK(pool.previous_epoch_done());
  CHECK(pool.available() == 2);
}
