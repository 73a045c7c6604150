// vrnicctl capture: asks a device for a capture (kCaptureStart), reads its rings
// (vrnic/capture_ring.h) and writes the frames to a pcap file with libpcap's writer.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

namespace vrnic::capture {

struct Options {
  std::string qp;       // "" : every QP
  uint64_t count = 0;   // stop after this many frames (0: at SIGINT or SIGTERM)
  std::string file;     // "-" : standard output
};

// The subcommand and its options, parsed into `o`.
CLI::App *add_subcommand(CLI::App &app, Options &o);
// Captures on the device at `socket` until the count, SIGINT/SIGTERM, or vrnicd's end; the
// exit status.
int run(const std::string &socket, const Options &o);

}  // namespace vrnic::capture
