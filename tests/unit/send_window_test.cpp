// The RC requester's go-back-N window: halves on loss, grows back with progress, stays within
// its bounds.
#include <catch2/catch.hpp>

#include "dataplane/send_window.h"

using vrnic::SendWindow;

TEST_CASE("SendWindow starts at its ceiling and admits exactly that many PSNs", "[window]") {
  SendWindow w;
  CHECK(w.psns() == SendWindow::kMaxPsns);
  CHECK(w.allows(SendWindow::kMaxPsns));
  CHECK_FALSE(w.allows(SendWindow::kMaxPsns + 1));
}

TEST_CASE("SendWindow halves on each loss down to its floor", "[window]") {
  SendWindow w;
  w.on_loss();
  CHECK(w.psns() == SendWindow::kMaxPsns / 2);
  for (int i = 0; i < 20; i++) w.on_loss();
  CHECK(w.psns() == SendWindow::kMinPsns);
  CHECK(w.allows(SendWindow::kMinPsns));
  CHECK_FALSE(w.allows(SendWindow::kMinPsns + 1));
}

TEST_CASE("SendWindow grows back with acknowledged PSNs, quickly when small", "[window]") {
  SendWindow w;
  for (int i = 0; i < 20; i++) w.on_loss();
  w.on_progress(8);
  CHECK(w.psns() == 2 * SendWindow::kMinPsns);  // below half the ceiling: by what was acked
  while (w.psns() < SendWindow::kMaxPsns / 2) w.on_progress(w.psns());
  uint32_t half = w.psns();
  w.on_progress(half - 1);
  CHECK(w.psns() == half);  // above it: only once a whole window has been acknowledged
  w.on_progress(1);
  CHECK(w.psns() > half);
  for (int i = 0; i < 1000; i++) w.on_progress(SendWindow::kMaxPsns);
  CHECK(w.psns() == SendWindow::kMaxPsns);
}
