//! Seeded randomness for the examples (splitmix64: tiny, fast, reproducible).

/// The splitmix64 generator.
///
/// # Examples
///
/// ```
/// let mut a = examples::rng::SplitMix64::new(7);
/// let mut b = examples::rng::SplitMix64::new(7);
/// assert_eq!(a.next_u64(), b.next_u64());
/// ```
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator starting from `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix(self.0)
    }

    /// A uniform float in `[0, 1)`.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A uniform integer in `0..n` (`n > 0`; 0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next_u64() % n }
    }
}

/// splitmix64's finaliser: a well-mixed hash of `x`.
///
/// # Examples
///
/// ```
/// assert_ne!(examples::rng::mix(1), examples::rng::mix(2));
/// ```
pub fn mix(x: u64) -> u64 {
    let mut z = x;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A uniform float in `[0, 1)` decided only by `parts`: the same inputs give the same draw.
///
/// # Examples
///
/// ```
/// use examples::rng::draw;
/// assert_eq!(draw(&[1, 2, 3]), draw(&[1, 2, 3]));
/// assert!((0.0..1.0).contains(&draw(&[4])));
/// ```
pub fn draw(parts: &[u64]) -> f64 {
    let h = parts
        .iter()
        .fold(0x243f_6a88_85a3_08d3_u64, |h, &p| mix(h ^ p));
    (h >> 11) as f64 / (1u64 << 53) as f64
}
