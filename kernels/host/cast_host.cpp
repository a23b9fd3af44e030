// Host-only fast paths for the output cast: a run of f32 values → binary16 / bfloat16 bits,
// giving exactly the bits of stoke_f32_to_f16_bits / stoke_f32_to_bf16_bits
// (kernels/stoke_common.cuh, what the device runs) for every input, NaN included.
//
// - x86-64 with F16C (checked at run time: the library is built for the baseline ISA and
//   must run on any x86-64): VCVTPS2PH with round-to-nearest-even from the immediate (not
//   MXCSR), which is IEEE RNE with subnormal results (FTZ does not apply to it). NaN lanes
//   are first replaced by sign | 0x7fc00000, which it converts to sign | 0x7e00, the quiet
//   NaN the scalar function returns for every NaN.
// - otherwise a branch-free scalar form the compiler vectorizes (selects instead of the
//   scalar function's branches, whose rounding tests mispredict on real data).
//
// The tests (src/augment/host.rs) check both forms against the scalar function and the
// `half` crate over a sweep of f32 bit patterns.
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "../stoke_common.cuh"

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define STOKE_HAVE_F16C_PATH 1
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace {

// stoke_f32_to_f16_bits without branches:
// - |x| < 2^-14 (half subnormal or zero): |x| + 0.5f has an ulp of 2^-24, the half subnormal
//   step, so the f32 addition rounds |x|·2^24 to nearest even and the low bits of the sum are
//   the half's bits (1024 = the smallest normal when it rounds up);
// - normal: rebias the exponent and round the 13 dropped bits to nearest even by adding
//   0xfff plus the kept lsb (a carry into the exponent is the correct result, up to inf);
// - |x| ≥ 65520 rounds to inf; NaN becomes the quiet NaN 0x7e00; the sign is kept throughout.
inline uint16_t f16_bits_branchless(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    const uint32_t sign = (x >> 16) & 0x8000u;
    const int32_t ax = (int32_t)(x & 0x7fffffffu);  // non-negative: signed compares vectorize on SSE2
    float fa;
    const uint32_t uax = (uint32_t)ax;
    memcpy(&fa, &uax, 4);
    const float sum = fa + 0.5f;
    uint32_t sb;
    memcpy(&sb, &sum, 4);
    const uint32_t sub = sb - 0x3f000000u;
    const uint32_t r = uax - 0x38000000u;
    const uint32_t nrm = (r + 0xfffu + ((r >> 13) & 1u)) >> 13;
    // Selects as masks (all ones / zero), so the compiler keeps the loop free of branches.
    const uint32_t is_sub = 0u - (uint32_t)(ax < 0x38800000);
    const uint32_t is_big = 0u - (uint32_t)(ax >= 0x477ff000);
    const uint32_t is_nan = 0u - (uint32_t)(ax > 0x7f800000);
    uint32_t o = (sub & is_sub) | (nrm & ~is_sub);
    o = (0x7c00u & is_big) | (o & ~is_big);
    o = (0x7e00u & is_nan) | (o & ~is_nan);
    return (uint16_t)(sign | o);
}

// stoke_f32_to_bf16_bits without branches.
inline uint16_t bf16_bits_branchless(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    const uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
    const uint32_t nan = (x >> 16) | 0x40u;
    return (uint16_t)((int32_t)(x & 0x7fffffffu) > 0x7f800000 ? nan : rounded);
}

#ifdef STOKE_HAVE_F16C_PATH
// NaN lanes (is_nan all ones) → sign | 0x7fc00000, other lanes unchanged; written with
// and/andnot/or (GCC 12 splits a blendv fed by a compare into per-lane branches here).
__attribute__((target("avx"))) inline __m256 nan_to_quiet(__m256 v, __m256 is_nan, __m256 sign_mask,
                                                          __m256 quiet_nan) {
    const __m256 canon = _mm256_or_ps(_mm256_and_ps(v, sign_mask), quiet_nan);
    return _mm256_or_ps(_mm256_andnot_ps(is_nan, v), _mm256_and_ps(is_nan, canon));
}

__attribute__((target("avx,f16c"))) void f16_run_f16c(const float* src, uint16_t* dst, size_t n) {
    const __m256 sign_mask = _mm256_castsi256_ps(_mm256_set1_epi32((int32_t)0x80000000u));
    const __m256 quiet_nan = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000));
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(src + i);
        const __m256 is_nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
        v = nan_to_quiet(v, is_nan, sign_mask, quiet_nan);
        _mm_storeu_si128((__m128i*)(dst + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
    }
    for (; i < n; i++) dst[i] = f16_bits_branchless(src[i]);
}

// stoke_normalize over a run, 8 values at a time: the same two IEEE divisions and the
// subtraction per element, so the same bits as the scalar form.
__attribute__((target("avx"))) void normalize_run_avx(const float* src, float mean, float std, float* dst, size_t n) {
    const __m256 k255 = _mm256_set1_ps(255.0f), m = _mm256_set1_ps(mean), sd = _mm256_set1_ps(std);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 x = _mm256_div_ps(_mm256_loadu_ps(src + i), k255);
        _mm256_storeu_ps(dst + i, _mm256_div_ps(_mm256_sub_ps(x, m), sd));
    }
    for (; i < n; i++) dst[i] = stoke_normalize(src[i], mean, std);
}

// normalize_run_avx then f16_run_f16c fused: no f32 round trip through memory.
__attribute__((target("avx,f16c"))) void normalize_f16_run_f16c(const float* src, float mean, float std, uint16_t* dst,
                                                                size_t n) {
    const __m256 k255 = _mm256_set1_ps(255.0f), m = _mm256_set1_ps(mean), sd = _mm256_set1_ps(std);
    const __m256 sign_mask = _mm256_castsi256_ps(_mm256_set1_epi32((int32_t)0x80000000u));
    const __m256 quiet_nan = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000));
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 x = _mm256_div_ps(_mm256_loadu_ps(src + i), k255);
        __m256 v = _mm256_div_ps(_mm256_sub_ps(x, m), sd);
        const __m256 is_nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
        v = nan_to_quiet(v, is_nan, sign_mask, quiet_nan);
        _mm_storeu_si128((__m128i*)(dst + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
    }
    for (; i < n; i++) dst[i] = f16_bits_branchless(stoke_normalize(src[i], mean, std));
}

// normalize_run_avx then bf16_bits_branchless, 8 at a time (AVX2 for the integer rounding).
__attribute__((target("avx2"))) void normalize_bf16_run_avx2(const float* src, float mean, float std, uint16_t* dst,
                                                             size_t n) {
    const __m256 k255 = _mm256_set1_ps(255.0f), m = _mm256_set1_ps(mean), sd = _mm256_set1_ps(std);
    const __m256i one = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7fff), abs_mask = _mm256_set1_epi32(0x7fffffff),
                  inf = _mm256_set1_epi32(0x7f800000), quiet = _mm256_set1_epi32(0x40);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 x = _mm256_div_ps(_mm256_loadu_ps(src + i), k255);
        const __m256i v = _mm256_castps_si256(_mm256_div_ps(_mm256_sub_ps(x, m), sd));
        const __m256i hi = _mm256_srli_epi32(v, 16);
        const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(v, bias), _mm256_and_si256(hi, one)), 16);
        const __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(v, abs_mask), inf);
        const __m256i r = _mm256_or_si256(_mm256_andnot_si256(is_nan, rounded), _mm256_and_si256(is_nan, _mm256_or_si256(hi, quiet)));
        // Every lane is ≤ 0xffff, so the unsigned-saturating pack is exact; it packs within
        // 128-bit halves, the permute puts the four 64-bit pieces back in order.
        const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0xd8);
        _mm_storeu_si128((__m128i*)(dst + i), _mm256_castsi256_si128(packed));
    }
    for (; i < n; i++) dst[i] = bf16_bits_branchless(stoke_normalize(src[i], mean, std));
}

// The CPU's features from CPUID and XGETBV directly (not __builtin_cpu_supports, whose
// libgcc/compiler-rt symbols do not link into a shared library built by zig for the
// manylinux wheel). AVX needs the OS to save the YMM state (XCR0 bits 1 and 2).
struct CpuFeatures {
    bool avx, avx2, f16c;
};

CpuFeatures cpu_features() {
    CpuFeatures f = {false, false, false};
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
    const bool osxsave = c & (1u << 27), avx = c & (1u << 28), f16c = c & (1u << 29);
    if (!osxsave || !avx) return f;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & 6u) != 6u) return f;
    f.avx = true;
    f.f16c = f16c;
    if (__get_cpuid_max(0, nullptr) >= 7) {
        __cpuid_count(7, 0, a, b, c, d);
        f.avx2 = b & (1u << 5);
    }
    return f;
}

bool detect_avx2() { return cpu_features().avx2; }

bool detect_avx() { return cpu_features().avx; }

// VCVTPS2PH is VEX-encoded: F16C is usable only with AVX (the OS saving the YMM state).
bool detect_f16c() {
    const CpuFeatures f = cpu_features();
    return f.avx && f.f16c;
}
#endif

}  // namespace

extern "C" {

// 1 when the F16C path is available on this CPU (and used by stoke_host_f16_run).
int stoke_host_has_f16c(void) {
#ifdef STOKE_HAVE_F16C_PATH
    static const bool have = detect_f16c();
    return have ? 1 : 0;
#else
    return 0;
#endif
}

// The portable branch-free form, for every CPU (exported so tests cover it everywhere).
void stoke_host_f16_run_portable(const float* src, uint16_t* dst, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = f16_bits_branchless(src[i]);
}

// The F16C form; returns −1 without writing when this CPU has no F16C.
int stoke_host_f16_run_f16c(const float* src, uint16_t* dst, size_t n) {
#ifdef STOKE_HAVE_F16C_PATH
    if (stoke_host_has_f16c()) {
        f16_run_f16c(src, dst, n);
        return 0;
    }
#endif
    (void)src;
    (void)dst;
    (void)n;
    return -1;
}

// dst[i] = stoke_f32_to_f16_bits(src[i]) for i < n, by the fastest form this CPU has.
void stoke_host_f16_run(const float* src, uint16_t* dst, size_t n) {
#ifdef STOKE_HAVE_F16C_PATH
    if (stoke_host_has_f16c()) {
        f16_run_f16c(src, dst, n);
        return;
    }
#endif
    stoke_host_f16_run_portable(src, dst, n);
}

// dst[i] = stoke_normalize(src[i], mean, std) for i < n (AVX when this CPU has it; the
// compiler's baseline vectorization otherwise).
void stoke_host_normalize_run(const float* src, float mean, float std, float* dst, size_t n) {
#ifdef STOKE_HAVE_F16C_PATH
    static const bool avx = detect_avx();
    if (avx) {
        normalize_run_avx(src, mean, std, dst, n);
        return;
    }
#endif
    for (size_t i = 0; i < n; i++) dst[i] = stoke_normalize(src[i], mean, std);
}

// dst[i] = stoke_f32_to_f16_bits(stoke_normalize(src[i], mean, std)) for i < n; `tmp` (n
// floats) is used when the CPU has no F16C.
void stoke_host_normalize_f16_run(const float* src, float mean, float std, uint16_t* dst, size_t n, float* tmp) {
#ifdef STOKE_HAVE_F16C_PATH
    if (stoke_host_has_f16c()) {
        normalize_f16_run_f16c(src, mean, std, dst, n);
        return;
    }
#endif
    stoke_host_normalize_run(src, mean, std, tmp, n);
    stoke_host_f16_run_portable(tmp, dst, n);
}

// dst[i] = stoke_f32_to_bf16_bits(stoke_normalize(src[i], mean, std)) for i < n; `tmp` (n
// floats) is used when the CPU has no AVX2.
void stoke_host_normalize_bf16_run(const float* src, float mean, float std, uint16_t* dst, size_t n, float* tmp) {
#ifdef STOKE_HAVE_F16C_PATH
    static const bool avx2 = detect_avx2();
    if (avx2) {
        normalize_bf16_run_avx2(src, mean, std, dst, n);
        return;
    }
#endif
    stoke_host_normalize_run(src, mean, std, tmp, n);
    for (size_t i = 0; i < n; i++) dst[i] = bf16_bits_branchless(tmp[i]);
}

// dst[i] = stoke_f32_to_bf16_bits(src[i]) for i < n (branch-free; vectorizes).
void stoke_host_bf16_run(const float* src, uint16_t* dst, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = bf16_bits_branchless(src[i]);
}

}  // extern "C"
