// The same-host direct path (issue 30): a work request between two QPs of this process runs on
// the posting thread itself -- the checks the responder would make, the copy, the completion
// -- instead of crossing to a vrnicd worker and back. What it cannot do exactly as the worker
// path would (an error to report, an armed CQ, a WR behind others still with vrnicd, a peer
// elsewhere) it leaves to the worker path, so that the two give the same completions in the
// same order.
//
// Revocation: the QPs and regions the direct path may use are published in the context's
// tables; a thread reads them only inside a direct section, and taking one out
// (ibv_dereg_mr, ibv_rereg_mr, ibv_destroy_qp) waits, after unpublishing, for every section
// that began before (direct_synchronize: an epoch per posting thread, as vrnicd's grace
// periods have one per worker). So once the call returns no direct access to the region can
// land.
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <cstdint>
#include <memory>

#include "direct_peers.h"
#include "index_table.h"

namespace vrnic::provider {

struct Mr;
struct Qp;
struct Cq;

// A context's direct path: present only when vrnicd allows it and VRNIC_DIRECT_PATH is not 0.
struct DirectPath {
  IndexTable<Mr, 23> mrs;  // by key handle (vrnic/object_keys.h)
  IndexTable<Qp, kQpnIndexBits> qps;  // by QPN index
  // Peers in other processes of the same user, when vrnicd gave us the user's directory.
  std::unique_ptr<DirectPeers> peers;
  // vrnicd's word (DaemonShared::direct_path): off while faults are injected.
  const std::atomic<uint32_t> *allowed = nullptr;
};

// The context's direct path, or nullptr (vrnicd's --no-direct-path, VRNIC_DIRECT_PATH=0).
std::unique_ptr<DirectPath> make_direct_path(const std::atomic<uint32_t> &daemon_allows,
                                             std::unique_ptr<DirectPeers> peers);

// Waits until every direct section of this process that began before the call has ended.
void direct_synchronize();
// The same for every poster of the user's other processes: called after vrnicd took one of
// our regions out of the directory (ibv_dereg_mr, ibv_rereg_mr).
void direct_synchronize_peers(DirectPath *d);

// Publishing and taking out what the direct path may reach. Taking out returns once no
// direct section can still use the object (a region: in any process, vrnicd having already
// taken it out of the directory).
void direct_publish_mr(DirectPath *d, Mr *mr);
void direct_unpublish_mr(DirectPath *d, Mr *mr);
void direct_publish_qp(DirectPath *d, Qp *qp);
void direct_unpublish_qp(DirectPath *d, Qp *qp);
// After a successful ibv_modify_qp: what the direct path checks of the QP and its peer.
void direct_note_modify(Qp *qp, const ibv_qp_attr &attr, int attr_mask);

// Runs the send WR on the posting thread when it may; true when it did (its completion, if
// any, is in its CQ), false to post it on the worker path. The QP's send lock is held and
// nothing earlier of the QP's send queue is still with vrnicd.
bool direct_post_send(DirectPath *d, Qp *qp, const ibv_send_wr *wr);

}  // namespace vrnic::provider
