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
#include <mutex>

namespace vrnic::provider {

struct Mr;
struct Qp;
struct Cq;

// Index -> object, read without locks on the fast path; pages are allocated on the control
// path (publish), never freed before the table.
template <typename T, uint32_t kIndexBits>
class IndexTable {
 public:
  ~IndexTable() {
    for (auto &p : pages_) delete[] p.load(std::memory_order_relaxed);
  }
  // False when the page cannot be allocated: the object then just never takes the direct path.
  bool publish(uint32_t index, T *obj) {
    if (index >> kIndexBits) return false;
    std::atomic<T *> *page = pages_[index >> kPageBits].load(std::memory_order_acquire);
    if (!page) {
      std::lock_guard lock(mu_);
      page = pages_[index >> kPageBits].load(std::memory_order_relaxed);
      if (!page) {
        page = new (std::nothrow) std::atomic<T *>[kPageSize]();
        if (!page) return false;
        pages_[index >> kPageBits].store(page, std::memory_order_release);
      }
    }
    page[index & (kPageSize - 1)].store(obj, std::memory_order_seq_cst);
    return true;
  }
  void unpublish(uint32_t index) {
    if (index >> kIndexBits) return;
    std::atomic<T *> *page = pages_[index >> kPageBits].load(std::memory_order_acquire);
    if (page) page[index & (kPageSize - 1)].store(nullptr, std::memory_order_seq_cst);
  }
  T *get(uint32_t index) const {
    if (index >> kIndexBits) return nullptr;
    std::atomic<T *> *page = pages_[index >> kPageBits].load(std::memory_order_acquire);
    return page ? page[index & (kPageSize - 1)].load(std::memory_order_seq_cst) : nullptr;
  }

 private:
  static constexpr uint32_t kPageBits = 12;
  static constexpr uint32_t kPageSize = 1u << kPageBits;
  static constexpr uint32_t kPages = (1u << kIndexBits) / kPageSize;
  std::atomic<std::atomic<T *> *> pages_[kPages] = {};
  std::mutex mu_;
};

// A context's direct path: present only when vrnicd allows it and VRNIC_DIRECT_PATH is not 0.
struct DirectPath {
  IndexTable<Mr, 23> mrs;  // by key handle (vrnic/object_keys.h)
  IndexTable<Qp, 17> qps;  // by QPN index
};

// The context's direct path, or nullptr (vrnicd's --no-direct-path, VRNIC_DIRECT_PATH=0).
std::unique_ptr<DirectPath> make_direct_path(bool daemon_allows);

// Waits until every direct section that began before the call has ended.
void direct_synchronize();

// Publishing and taking out what the direct path may reach. Taking out returns once no
// direct section can still use the object.
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
