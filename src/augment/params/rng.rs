//! [`SampleRng`]: the counter-based stream every per-sample draw comes from, keyed by `(seed,
//! epoch, sample, stream)` (the stream ids live beside the draws that use them).

/// A counter-based random stream keyed by `(seed, epoch, sample, stream)`.
///
/// SplitMix64 over a keyed counter: cheap, stateless between samples, stable across crate
/// versions (unlike `rand`'s `StdRng`, whose algorithm may change), so a seed means the same
/// pictures in every release and on every thread count.
#[derive(Clone, Debug)]
pub struct SampleRng {
    state: u64,
}

#[inline]
fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl SampleRng {
    /// The stream for one sample of one epoch. `stream` separates independent uses
    /// (augment parameters, substitutes, weighted sampling) of the same sample.
    pub fn new(seed: u64, epoch: u64, sample: u64, stream: u64) -> Self {
        let k = mix64(seed ^ 0x5354_4f4b_4500_0001);
        let k = mix64(k ^ epoch.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let k = mix64(k ^ sample.wrapping_mul(0xd1b5_4a32_d192_ed03));
        let k = mix64(k ^ stream.wrapping_mul(0x8cb9_2ba7_2f3d_8dd7));
        Self { state: k }
    }

    /// Next 64 random bits.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix64(self.state)
    }

    /// Uniform in `[0, 1)` with 53 random bits.
    #[inline]
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in `[lo, hi)`.
    #[inline]
    pub fn uniform_in(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.uniform()
    }

    /// Uniform integer in `[0, n)` without modulo bias (Lemire's method). `n > 0`.
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        debug_assert!(n > 0);
        let threshold = n.wrapping_neg() % n;
        loop {
            let m = (self.next_u64() as u128) * (n as u128);
            if (m as u64) >= threshold {
                return (m >> 64) as u64;
            }
        }
    }

    /// True with probability `p`.
    #[inline]
    pub fn bernoulli(&mut self, p: f64) -> bool {
        p > 0.0 && self.uniform() < p
    }

    /// A standard normal value (Box–Muller, cosine branch, f64).
    pub fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.uniform(); // (0, 1]
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }
}

/// `SampleRng` is a [`rand`] generator too (`rand::Rng` through this impl), so a user's own
/// extra augmentations can use rand's distributions on the same keyed, reproducible stream.
impl rand::TryRng for SampleRng {
    type Error = std::convert::Infallible;

    fn try_next_u32(&mut self) -> Result<u32, Self::Error> {
        Ok((self.next_u64() >> 32) as u32)
    }

    fn try_next_u64(&mut self) -> Result<u64, Self::Error> {
        Ok(self.next_u64())
    }

    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Self::Error> {
        for chunk in dst.chunks_mut(8) {
            chunk.copy_from_slice(&self.next_u64().to_le_bytes()[..chunk.len()]);
        }
        Ok(())
    }
}
