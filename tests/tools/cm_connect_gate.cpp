// cm_connect_gate: an LD_PRELOAD shim for an rdma_cm client under test. Each rdma_resolve_addr
// first runs the shell command in $VRNIC_CM_GATE and waits for it: the test's command returns
// once the peer listens. For a peer that listens for a connection only after an earlier one
// is up (perftest -R's server binds its second listener after the first connection's
// exchange), the client's connect then cannot come before the listener: the rxe group's
// perftest -R checks are deterministic instead of a race the slower side loses.
#include <dlfcn.h>
#include <rdma/rdma_cma.h>

#include <cstdlib>

namespace {
using Fn = int (*)(rdma_cm_id *, sockaddr *, sockaddr *, int);
// Looked up on first use (every thread finds the same): no function-local static, whose
// guard would need the C++ runtime, which the rxe VM, where it runs too, does not have.
Fn real = nullptr;
}  // namespace

extern "C" int rdma_resolve_addr(rdma_cm_id *id, sockaddr *src, sockaddr *dst, int timeout_ms) {
  if (!real) real = reinterpret_cast<Fn>(::dlsym(RTLD_NEXT, "rdma_resolve_addr"));
  if (const char *gate = std::getenv("VRNIC_CM_GATE")) {
    [[maybe_unused]] int rc = std::system(gate);  // the connect below reports what matters
  }
  return real(id, src, dst, timeout_ms);
}
