// Enhanced Connection Establishment (ECE, rdma-core's ibv_query_ece/ibv_set_ece and the
// vendor ID and options the IB CM carries in REQ and REP): what vrnic offers a peer that is a
// vrnic too. One definition for the provider, vrnicd's transport and the tests.
#pragma once

#include <cstdint>

namespace vrnic {

// vrnic's vendor ID, in ibv_query_device and in ECE. Not an IEEE-assigned OUI (vrnic is a
// software device): ECE compares it only with the peer's, and a peer of another vendor gets
// options 0, as rdma-core's librdmacm has it.
inline constexpr uint32_t kVrnicVendorId = 0x5652;

// ECE options (ibv_ece.options; the CM MAD's attribute modifier).
// Selective repeat (wire::Sack): the responder's sequence NAKs say which later PSNs it holds
// and the requester sends again only what is missing.
inline constexpr uint32_t kEceSelectiveRepeat = 1u << 0;
// Every option this vrnic knows: what a QP offers until ibv_set_ece says otherwise.
inline constexpr uint32_t kEceSupported = kEceSelectiveRepeat;

}  // namespace vrnic
