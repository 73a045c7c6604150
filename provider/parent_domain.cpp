// Thread domains and parent domains (ibv_alloc_td, ibv_alloc_parent_domain). A parent domain
// is a PD for every verb: it names its protection domain's handle to vrnicd (as rdma-core's
// ibv_initialize_parent_domain does), and it may carry a thread domain (a hint: vrnic's
// queues take the same locks either way) and the application's pd_context. Custom allocators
// (IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS) are EOPNOTSUPP, as EFA answers: a queue's memory
// is memory vrnicd shares with the client (its ring arena), which an application allocator's
// memory -- hugetlb pages, a pool, a NUMA policy of its own -- cannot be without losing what
// the application asked it for.
#include <cerrno>
#include <new>

#include "internal.h"

namespace vrnic::provider {

ibv_td *alloc_td(ibv_context *ctx, ibv_td_init_attr *attr) {
  if (!attr || attr->comp_mask) return fail_null<ibv_td>(EINVAL);
  auto *td = new (std::nothrow) Td{};
  if (!td) return fail_null<ibv_td>(ENOMEM);
  td->ibv.context = ctx;
  return &td->ibv;
}

int dealloc_td(ibv_td *ibtd) {
  Td *td = Td::of(ibtd);
  if (td->parents.load()) return EBUSY;  // a parent domain still holds it
  delete td;
  return 0;
}

ibv_pd *alloc_parent_domain(ibv_context *ctx, ibv_parent_domain_init_attr *attr) {
  if (!attr || !attr->pd || attr->pd->context != ctx) return fail_null<ibv_pd>(EINVAL);
  if (attr->comp_mask & ~uint32_t(IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT))
    return fail_null<ibv_pd>(EOPNOTSUPP);
  Pd *protection = Pd::of(attr->pd);
  if (protection->protection_domain) return fail_null<ibv_pd>(EINVAL);  // no nesting
  if (attr->td && attr->td->context != ctx) return fail_null<ibv_pd>(EINVAL);
  auto *parent = new (std::nothrow) Pd{};
  if (!parent) return fail_null<ibv_pd>(ENOMEM);
  parent->ibv.context = ctx;
  parent->ibv.handle = attr->pd->handle;  // vrnicd's PD is the protection domain's
  parent->protection_domain = protection;
  protection->parents++;
  if (attr->td) {
    parent->td = Td::of(attr->td);
    parent->td->parents++;
  }
  if (attr->comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT) parent->pd_context = attr->pd_context;
  return &parent->ibv;
}

int dealloc_parent_domain(Pd *parent) {
  parent->protection_domain->parents--;
  if (parent->td) parent->td->parents--;
  delete parent;
  return 0;
}

}  // namespace vrnic::provider
