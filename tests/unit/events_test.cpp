// Events towards a client never cost vrnicd its time (issue 28, rows 2 and 3): an event
// channel its client filled and made blocking takes a record without waiting, or loses it.
#include <catch2/catch.hpp>
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>

#include "dataplane/events.h"
#include "vrnic/ctl_io.h"

TEST_CASE("events: a full channel its client made blocking loses the record, at once", "[events]") {
  int fds[2];
  REQUIRE(vrnic::ctl::make_event_channel(fds) == 0);
  // The client fills the channel through the end vrnicd holds, and clears O_NONBLOCK on it
  // (the trick that froze vrnicd when the channel was a pipe).
  vrnic::ctl::EventRecord rec{1, 0, 0};
  size_t held = 0;
  while (vrnic::ctl::send_event(fds[1], &rec, sizeof(rec))) held++;
  CHECK(errno == EAGAIN);
  CHECK(held >= 1000);  // room for a burst from many CQs
  ::fcntl(fds[1], F_SETFL, ::fcntl(fds[1], F_GETFL) & ~O_NONBLOCK);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 100; i++) vrnic::raise_event(fds[1], 7, 42);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(1));
  // Once the client reads, records flow again, whole.
  vrnic::ctl::EventRecord got{};
  REQUIRE(::read(fds[0], &got, sizeof(got)) == sizeof(got));
  vrnic::raise_event(fds[1], 7, 42);
  for (size_t i = 1; i < held; i++) REQUIRE(::read(fds[0], &got, sizeof(got)) == sizeof(got));
  REQUIRE(::read(fds[0], &got, sizeof(got)) == sizeof(got));
  CHECK(got.type == 7);
  CHECK(got.cookie == 42);
  ::close(fds[0]);
  ::close(fds[1]);
}
