// A region that changes under a message in flight (issue 28, rows 1 and 11): ibv_rereg_mr
// (a new translation, or new access rights) or a window's invalidation between any two
// packets of a WRITE or of a READ's responses. Every packet is checked against the region as
// it is when that packet is handled: what follows the change gets a remote access NAK, the
// requester an IBV_WC_REM_ACCESS_ERR, and no byte lands or is read outside what the region
// allows at that moment. The change is made at every packet boundary of the message.
#include <catch2/catch.hpp>
#include <cstring>

#include "dataplane/transport.h"
#include "transport_harness.h"

using namespace vrnic;
using namespace vrnic::testing;

namespace {

constexpr uint32_t kMtu = 1024;
constexpr uint32_t kPackets = 16;
constexpr uint32_t kLength = kPackets * kMtu;
constexpr uint32_t kAllRemote = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |
                                IBV_ACCESS_MW_BIND;

// Memory a region is moved onto: 4 KiB between two guard pages that must stay zero.
struct Landing {
  std::vector<uint8_t> bytes = std::vector<uint8_t>(3 * 4096);
  uint8_t *region() { return bytes.data() + 4096; }
  bool untouched() const {
    for (uint8_t b : bytes)
      if (b) return false;
    return true;
  }
};

enum class Change { kTranslation, kAccess, kWindow };

// ibv_rereg_mr as vrnicd does it (one table swap, same handle and key): onto `landing`
// (IBV_REREG_MR_CHANGE_TRANSLATION, so the iova is the new address) or with `access`.
void rereg(QpEnd &end, Landing *landing, uint32_t access) {
  MemoryRegion *cur = end.dev.mr_by_key(end.key);
  auto mr = std::make_unique<MemoryRegion>();
  mr->handle = cur->handle;
  mr->key = cur->key;
  mr->pd = cur->pd;
  mr->access = access;
  if (landing) {
    mr->addr = mr->iova = reinterpret_cast<uint64_t>(landing->region());
    mr->length = 4096;
    mr->pieces.push_back({mr->addr, 4096, landing->region()});
  } else {
    mr->addr = mr->iova = cur->addr;
    mr->length = cur->length;
    mr->pieces = cur->pieces;
  }
  end.dev.mrs.replace(cur->handle, std::move(mr));
}

// Binds a type 2 window over the whole of end's memory to end's QP; its rkey.
uint32_t bind_window(QpEnd &end) {
  end.dev.mr_by_key(end.key)->access |= IBV_ACCESS_MW_BIND;
  auto mw = std::make_unique<MemoryWindow>();
  mw->pd = end.qp->pd;
  mw->session = end.qp->session;
  mw->type = IBV_MW_TYPE_2;
  MemoryWindow *raw = mw.get();
  uint32_t handle = end.dev.mws.insert(std::move(mw));
  raw->handle = handle;
  raw->key = kMwKeyBit | handle << 8 | end.dev.mws.generation(handle);
  shm::SendWqe bind{};
  bind.opcode = IBV_WR_BIND_MW;
  bind.rkey = raw->key;
  bind.remote_addr = end.addr(0);
  bind.compare_add = end.mem.size();
  bind.swap = uint64_t(IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ) << 32 | end.key;
  REQUIRE(execute_local_op(end.dev, *end.qp, bind) == IBV_WC_SUCCESS);
  return raw->key;
}

void change(QpEnd &end, Change how, Landing &landing, uint32_t window, uint32_t revoked) {
  switch (how) {
    case Change::kTranslation:
      return rereg(end, &landing, kAllRemote);
    case Change::kAccess:
      return rereg(end, nullptr, kAllRemote & ~revoked);
    case Change::kWindow:
      REQUIRE(invalidate_window(end.dev, *end.qp, window));
      return;
  }
}

bool all_zero(const uint8_t *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (p[i]) return false;
  return true;
}

// Posts the WQE (through the window when there is one), runs the pair; the one completion.
shm::Cqe run_one(QpPair &p, shm::SendWqe wqe, uint32_t window) {
  if (window) wqe.rkey = window;
  p.a.post_send(wqe);
  p.run();
  const std::vector<shm::Cqe> cqes = p.a.poll_send_cq();
  REQUIRE(cqes.size() == 1);
  return cqes[0];
}

// `to` holds the first k packets' worth of `from`'s bytes and nothing after them.
bool holds_only_first(const QpEnd &to, const QpEnd &from, uint32_t k) {
  return std::memcmp(to.mem.data(), from.mem.data(), k * kMtu) == 0 &&
         all_zero(to.mem.data() + k * kMtu, to.mem.size() - k * kMtu);
}

const char *name(Change how) {
  return how == Change::kTranslation ? "translation" : how == Change::kAccess ? "access" : "window";
}

}  // namespace

TEST_CASE("region change: a WRITE's packets after a rereg or invalidation are refused", "[region]") {
  for (Change how : {Change::kTranslation, Change::kAccess, Change::kWindow}) {
    for (uint32_t k = 1; k < kPackets; k++) {
      INFO(name(how) << " changed after " << k << " of " << kPackets << " packets");
      QpPair p;
      Landing landing;
      for (uint32_t i = 0; i < kLength; i++) p.a.mem[i] = uint8_t(1 + i % 251);
      uint32_t window = how == Change::kWindow ? bind_window(p.b) : 0;
      uint32_t landed = 0;
      p.before_delivery = [&](const QpEnd &to, const Packet &pkt) {
        if (&to != &p.b || !(pkt.info().flags & kOpWrite)) return;
        if (landed++ == k) change(p.b, how, landing, window, IBV_ACCESS_REMOTE_WRITE);
      };
      CHECK(run_one(p, write_wqe(1, p.a, 0, kLength, p.b, 0), window).status ==
            IBV_WC_REM_ACCESS_ERR);
      // What arrived before the change is there, nothing after it, nothing elsewhere.
      CHECK(holds_only_first(p.b, p.a, k));
      CHECK(landing.untouched());
      CHECK(p.b.qp->state() == IBV_QPS_ERR);
    }
  }
}

TEST_CASE("region change: a READ's responses after a rereg or invalidation stop", "[region]") {
  for (Change how : {Change::kTranslation, Change::kAccess, Change::kWindow}) {
    for (uint32_t k = 1; k < kPackets; k++) {
      INFO(name(how) << " changed after " << k << " of " << kPackets << " responses");
      QpPair p;
      Landing landing;
      for (uint32_t i = 0; i < kLength; i++) p.b.mem[i] = uint8_t(1 + i % 251);
      uint32_t window = how == Change::kWindow ? bind_window(p.b) : 0;
      uint32_t responses = 0;
      p.b.host.on_transmit = [&](const Packet &pkt) {
        if (!(pkt.info().flags & kOpReadResponse)) return;
        if (++responses == k) change(p.b, how, landing, window, IBV_ACCESS_REMOTE_READ);
      };
      CHECK(run_one(p, read_wqe(1, p.a, 0, kLength, p.b, 0), window).status ==
            IBV_WC_REM_ACCESS_ERR);
      CHECK(responses == k);  // no response built from the region as it is after the change
      CHECK(holds_only_first(p.a, p.b, k));
      CHECK(landing.untouched());
    }
  }
}

TEST_CASE("region change: a region moved far below a WRITE's address takes nothing", "[region]") {
  // The demonstrated attack: an iova far above the buffer, then a rereg onto 4 KiB. Before,
  // the later packets were written at (old iova - new iova) past vrnicd's mapping.
  QpPair p;
  Landing landing;
  MemoryRegion *mr = p.b.dev.mr_by_key(p.b.key);
  mr->iova += 1ull << 40;
  shm::SendWqe wqe = write_wqe(1, p.a, 0, kLength, p.b, 0);
  wqe.remote_addr += 1ull << 40;
  uint32_t landed = 0;
  p.before_delivery = [&](const QpEnd &to, const Packet &) {
    if (&to == &p.b && landed++ == 1) rereg(p.b, &landing, kAllRemote);
  };
  for (uint32_t i = 0; i < kLength; i++) p.a.mem[i] = uint8_t(1 + i % 251);
  p.a.post_send(wqe);
  p.run();
  const std::vector<shm::Cqe> cqes = p.a.poll_send_cq();
  REQUIRE(cqes.size() == 1);
  CHECK(cqes[0].status == IBV_WC_REM_ACCESS_ERR);
  CHECK(landing.untouched());
  CHECK(all_zero(p.b.mem.data() + kMtu, p.b.mem.size() - kMtu));
}

TEST_CASE("region: an access outside a one-piece region touches nothing", "[region]") {
  std::vector<uint8_t> buf(4096, 0);
  MemoryRegion mr;
  mr.addr = mr.iova = reinterpret_cast<uint64_t>(buf.data());
  mr.length = buf.size();
  mr.pieces.push_back({mr.addr, buf.size(), buf.data()});
  uint8_t data[64];
  std::memset(data, 0xab, sizeof(data));
  CHECK_FALSE(mr.write(mr.iova + (1ull << 40), data, sizeof(data)));
  CHECK_FALSE(mr.write(mr.iova - 64, data, sizeof(data)));
  CHECK_FALSE(mr.write(mr.iova + 4096 - 32, data, sizeof(data)));
  CHECK_FALSE(mr.read(mr.iova + 4096, data, 1));
  CHECK(mr.local_span(mr.iova + 4090, 8) == nullptr);
  uint64_t orig = 0;
  CHECK_FALSE(mr.atomic_fetch_add(mr.iova + 4096, 1, &orig));
  CHECK(all_zero(buf.data(), buf.size()));
  CHECK(mr.write(mr.iova + 4096 - 64, data, sizeof(data)));
}
