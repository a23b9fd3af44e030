// The whole-image augment of augment_host.cpp compiled again for AVX2 (x86-64-v3), exported as
// stoke_host_augment_avx2; src/augment/host.rs picks it at run time when the CPU has AVX2
// (STOKE_CPU_ISA=baseline forces the baseline build). Same source, same f32 operations in the
// same order (-ffp-contract=off: no FMA contraction), so the same bits: only the vector width
// of the loops the compiler vectorizes differs. A unit test checks the two bit for bit.
//
// Everything shared is `static inline` here (STOKE_HD) or in an anonymous namespace (the
// file's helpers), so no AVX2 copy of a function can stand in for the baseline's at link time.
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define STOKE_HOST_AVX2 1
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2"))), apply_to = function)
#elif defined(__GNUC__)
#pragma GCC push_options
#pragma GCC target("avx2")
#endif
#endif

#define STOKE_HD static inline
#define STOKE_HOST_ISA_SUFFIX _avx2
#include "augment_host.cpp"

#if defined(__x86_64__) || defined(__i386__)
#if defined(__clang__)
#pragma clang attribute pop
#elif defined(__GNUC__)
#pragma GCC pop_options
#endif
#endif
