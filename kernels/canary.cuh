// Decode canaries, the per-pixel part: where canary k of a decode destination sits and what it
// holds. Host-compiled too (kernels/host/gpu_augment_host.cpp), so the Rust side's placement
// (src/backend/cuda/decode/canary.rs) is checked against this exact code in CI.
#pragma once
#include "stoke_common.cuh"

// Mirror of `DecodeTarget` in src/backend/cuda/decode/canary.rs: where one GPU decode writes.
struct StokeDecodeTarget {
    uint64_t offset;  // arena byte offset of the decoded region
    uint32_t width;   // decoded width (the ROI's)
    uint32_t height;
    uint32_t pitch;   // bytes per row (3·width)
    uint32_t pad;
};
static_assert(sizeof(StokeDecodeTarget) == 24, "StokeDecodeTarget must match DecodeTarget (24 bytes)");

#define STOKE_CANARIES 32u

// Canary k of a w×h region: rows spread evenly, columns a permutation of the same bands
// (13 is coprime with 32), three bytes that differ from each other.
STOKE_HD uint64_t stoke_canary_at(const StokeDecodeTarget& t, uint32_t k, uint8_t v[3]) {
    const uint64_t y = ((2u * (uint64_t)k + 1u) * t.height) / (2u * STOKE_CANARIES);
    const uint64_t x = ((2u * (uint64_t)((k * 13u) % STOKE_CANARIES) + 1u) * t.width) / (2u * STOKE_CANARIES);
    const uint8_t b = (uint8_t)(0xA5u ^ (k * 29u));
    v[0] = b;
    v[1] = (uint8_t)(b ^ 0x5Au);
    v[2] = (uint8_t)(b ^ 0xC3u);
    return t.offset + y * t.pitch + x * 3u;
}
