// The window a worker's RC requesters share towards one peer: what it admits, how loss events
// shrink it (once per event), how acknowledgements grow it, and when probes run.
#include <catch2/catch.hpp>

#include "dataplane/peer_window.h"

using vrnic::PeerWindow;
using Loss = PeerWindow::Loss;

namespace {

// Puts `n` PSNs in flight from one imaginary QP.
void fill(PeerWindow &w, uint32_t n) {
  w.charge(w.in_flight(), w.in_flight() + n);
}

}  // namespace

TEST_CASE("PeerWindow admits packets until what is out reaches the window", "[peer_window]") {
  PeerWindow w;
  CHECK(w.packets() == PeerWindow::kInitialPackets);
  fill(w, PeerWindow::kInitialPackets - 1);
  CHECK(w.allows());
  fill(w, 1);
  CHECK_FALSE(w.allows());
  w.charge(10, 0);  // a QP with 10 out is acknowledged (or rewinds, or leaves)
  CHECK(w.in_flight() == PeerWindow::kInitialPackets - 10);
  CHECK(w.allows());
}

TEST_CASE("PeerWindow doubles per window acknowledged up to its ceiling", "[peer_window]") {
  PeerWindow w;
  w.on_progress(PeerWindow::kInitialPackets);
  CHECK(w.packets() == 2 * PeerWindow::kInitialPackets);
  while (!w.at_ceiling()) w.on_progress(w.packets());
  CHECK(w.packets() == PeerWindow::kMaxPackets);
  w.on_progress(PeerWindow::kMaxPackets);
  CHECK(w.packets() == PeerWindow::kMaxPackets);
}

TEST_CASE("PeerWindow: a NAK halves what was out, once per loss event", "[peer_window]") {
  PeerWindow w;
  while (!w.at_ceiling()) w.on_progress(w.packets());
  fill(w, 1000);
  w.on_loss(Loss::kNak, 1);
  CHECK(w.packets() == 500);
  // The other QPs report the same event: no further cut until what was out is acknowledged.
  w.on_loss(Loss::kNak, 2);
  w.on_loss(Loss::kProbe, 3);
  CHECK(w.packets() == 500);
  w.charge(1000, 0);
  w.on_progress(999);
  fill(w, 400);
  w.on_loss(Loss::kNak, 4);
  CHECK(w.packets() > 400);  // still the same event: grown by an eighth, not cut
  w.on_progress(1);
  w.on_loss(Loss::kNak, 5);  // a new one: half of what is out now
  CHECK(w.packets() == 200);
}

TEST_CASE("PeerWindow: a window just cut still has the old window's packets out", "[peer_window]") {
  PeerWindow w;
  fill(w, 64);
  w.on_loss(Loss::kNak, 1);
  CHECK(w.packets() == 32);
  w.on_progress(64);  // the event is over; the threshold is 32: growth by an eighth
  CHECK(w.packets() == 32 + 4);
  fill(w, 500);  // more out than the window (the QPs' rewinds came later)
  w.on_loss(Loss::kNak, 2);
  CHECK(w.packets() == 18);  // half the window, not half of 564
}

TEST_CASE("PeerWindow: an IB timeout drops it to the floor; growth after", "[peer_window]") {
  PeerWindow w;
  while (!w.at_ceiling()) w.on_progress(w.packets());
  fill(w, 2000);
  w.on_loss(Loss::kTimeout, 1);
  CHECK(w.packets() == PeerWindow::kMinPackets);
  w.charge(2000, 0);
  w.on_progress(2000);  // below the threshold (1000): by what was acknowledged
  CHECK(w.packets() == 1000);
  w.on_progress(999);
  CHECK(w.packets() == 1000);  // above it: once a whole window has been acknowledged
  w.on_progress(1);
  CHECK(w.packets() == 1125);
  for (int i = 0; i < 20; i++) w.on_loss(Loss::kTimeout, 2);
  CHECK(w.packets() == PeerWindow::kMinPackets);
}

TEST_CASE("PeerWindow: probes run only within a second of a NAK or timeout", "[peer_window]") {
  PeerWindow w;
  const uint64_t s = 1'000'000'000;
  CHECK_FALSE(w.lossy(5 * s));
  w.on_loss(Loss::kProbe, 5 * s);  // a probe is no evidence of loss
  CHECK_FALSE(w.lossy(5 * s));
  w.on_loss(Loss::kNak, 5 * s);
  CHECK(w.lossy(5 * s + s / 2));
  CHECK_FALSE(w.lossy(6 * s + 1));
  w.on_loss(Loss::kTimeout, 7 * s);
  CHECK(w.lossy(7 * s));
}

TEST_CASE("PeerWindow: probe time from round trips, never under its floor", "[peer_window]") {
  PeerWindow w;
  CHECK(w.probe_ns() == PeerWindow::kMinProbeNs);
  w.rtt_sample(4'000'000);  // first sample: srtt 4 ms, rttvar 2 ms
  CHECK(w.srtt_ns() == 4'000'000);
  CHECK(w.probe_ns() == 4'000'000 + 4 * 2'000'000);
  for (int i = 0; i < 200; i++) w.rtt_sample(100'000);
  CHECK(w.srtt_ns() < 110'000);
  CHECK(w.probe_ns() == PeerWindow::kMinProbeNs);
}
