// Symbol export control for the drop-in libibverbs.so.1.
//
// The provider is compiled with -fvisibility=hidden (meson: gnu_symbol_visibility : 'hidden').
// A symbol ends up in the dynamic symbol table only if BOTH
//   1. its definition has default visibility (mark it VRNIC_EXPORT), and
//   2. provider/libibverbs.map lists it in the version node that is its default version.
// A name listed in the map but defined without VRNIC_EXPORT is silently NOT exported, and a
// VRNIC_EXPORT definition missing from the map is made local by the map's `local: *;`.
// tests/abi_check.sh compares the result against the system libibverbs.
//
// Usage (C++): extern "C" VRNIC_EXPORT int ibv_foo(struct ibv_context *ctx) { ... }
#pragma once

#define VRNIC_EXPORT __attribute__((visibility("default")))
