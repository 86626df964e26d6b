//! A small mutation fuzzer that runs on stable Rust, for the decoders' fuzz tests: seeds
//! (valid inputs) are mutated at random (bit flips, byte changes, insertions, deletions,
//! splices, interesting integers) and each result is fed to the target, which must not
//! panic. Bounded in iterations and in time, so CI runs it for a known cost; the seed of
//! the run is printed so a failure can be replayed with `H2_FUZZ_SEED`.
#![allow(dead_code, clippy::indexing_slicing, clippy::arithmetic_side_effects)]

use std::time::{Duration, Instant};

/// A xorshift64* generator: reproducible from its seed, no dependency.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    pub fn byte(&mut self) -> u8 {
        self.next() as u8
    }
}

/// Bytes that often sit on a decoder's edges: zero, one, the top of a prefix, all ones.
const INTERESTING: [u8; 10] = [0x00, 0x01, 0x1f, 0x3f, 0x7f, 0x80, 0xfe, 0xff, 0x0f, 0x40];

/// Changes `input` in one to four random ways; `seeds` lends bytes for splices.
pub fn mutate(rng: &mut Rng, input: &mut Vec<u8>, seeds: &[Vec<u8>], max_len: usize) {
    for _ in 0..=rng.below(4) {
        match rng.below(8) {
            0 if !input.is_empty() => {
                let at = rng.below(input.len());
                input[at] ^= 1 << rng.below(8);
            }
            1 if !input.is_empty() => {
                let at = rng.below(input.len());
                input[at] = rng.byte();
            }
            2 if !input.is_empty() => {
                let at = rng.below(input.len());
                input[at] = INTERESTING[rng.below(INTERESTING.len())];
            }
            3 if input.len() < max_len => {
                let at = rng.below(input.len() + 1);
                let count = 1 + rng.below(8);
                for _ in 0..count {
                    input.insert(at, rng.byte());
                }
            }
            4 if !input.is_empty() => {
                let at = rng.below(input.len());
                let count = 1 + rng.below((input.len() - at).min(16));
                input.drain(at..at + count);
            }
            5 if !seeds.is_empty() => {
                // Splice: a run of another seed over or into this one.
                let other = &seeds[rng.below(seeds.len())];
                if !other.is_empty() {
                    let from = rng.below(other.len());
                    let len = 1 + rng.below((other.len() - from).min(32));
                    let at = rng.below(input.len() + 1);
                    let piece = other[from..from + len].to_vec();
                    input.splice(at..at, piece);
                }
            }
            6 if !input.is_empty() => {
                input.truncate(rng.below(input.len()));
            }
            _ => {
                // A run of one repeated byte: long integers, padding, repeated prefixes.
                let at = rng.below(input.len() + 1);
                let byte = INTERESTING[rng.below(INTERESTING.len())];
                let count = 1 + rng.below(16);
                input.splice(at..at, std::iter::repeat_n(byte, count));
            }
        }
    }
    input.truncate(max_len);
}

/// Runs `target` on `iterations` mutated inputs, or for `budget`, whichever ends first,
/// and on every seed as it is. The seed comes from `H2_FUZZ_SEED` when set (to replay a
/// failure), else from the clock; it is printed before the run.
pub fn run(
    name: &str,
    seeds: &[Vec<u8>],
    iterations: u64,
    budget: Duration,
    max_len: usize,
    mut target: impl FnMut(&[u8]),
) -> u64 {
    let seed =
        std::env::var("H2_FUZZ_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
        });
    eprintln!("fuzz {name}: H2_FUZZ_SEED={seed}");
    let mut rng = Rng::new(seed);
    for input in seeds {
        target(input);
    }
    let start = Instant::now();
    let mut done = 0;
    while done < iterations && start.elapsed() < budget {
        let mut input = if seeds.is_empty() || rng.below(16) == 0 {
            Vec::new()
        } else {
            seeds[rng.below(seeds.len())].clone()
        };
        mutate(&mut rng, &mut input, seeds, max_len);
        target(&input);
        done += 1;
    }
    done
}
