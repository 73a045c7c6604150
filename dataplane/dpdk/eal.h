// DPDK's EAL for the dpdk module: set up once per process (by the first dpdk device's
// arguments, later devices hot-plugged), the arguments that name devices, what a device's
// arguments say of its link (memif's buffer size, the kernel interface under af_packet or
// af_xdp), and the EAL interrupt thread that device stops and starts must run on.
#pragma once

#include <rte_alarm.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

namespace vrnic::dpdk {

// Sets the EAL up, or adds the devices a later device's arguments name; false and *error.
bool init_eal(const std::vector<std::string> &user_args, std::string *error);

// A device's EAL arguments, split into the devices they name (--vdev SPEC, -a SPEC, --allow
// SPEC: a vdev's name and options, or a PCI address and options) and the rest.
struct EalArgs {
  std::vector<std::string> devices;
  std::vector<std::string> rest;
};
EalArgs split_eal_args(const std::vector<std::string> &args);

// The interface an af_packet or af_xdp vdev runs on ("iface=veth0"), whose kernel link state
// is the port's; "" for other devices.
std::string kernel_interface(const std::vector<std::string> &eal_args);
// The link MTU of a memif device (what one of its buffers holds; see eal.cpp).
uint16_t memif_mtu(const std::vector<std::string> &eal_args);
// Whether the kernel says the interface is running (IFF_RUNNING); true when it cannot tell.
bool kernel_link_running(const std::string &iface);

// Runs fn on EAL's interrupt thread and waits for it. memif's control channel lives on that
// thread and tears a connection down there (freeing it); stopping or starting the device from
// another thread at the same moment raced it (a use-after-free when the peer went away just as
// a restart began). Every stop, start and close goes through here, so they take turns with
// the PMD's own handlers. Falls back to the calling thread if no alarm can be set.
template <class Fn>
void on_interrupt_thread(Fn fn) {
  struct Call {
    Fn *fn;
    std::atomic<bool> done{false};
  } call{&fn};
  auto run = [](void *arg) {
    auto *c = static_cast<Call *>(arg);
    (*c->fn)();
    c->done.store(true, std::memory_order_release);
  };
  if (rte_eal_alarm_set(1, run, &call) != 0) return fn();
  while (!call.done.load(std::memory_order_acquire)) std::this_thread::yield();
}

}  // namespace vrnic::dpdk
