//! Messages a confused or hostile peer may send over the network transport, and what each
//! may do to the receiver: the generator and model of the `net-garbage` scenario
//! (`tca-rankprog`), which sends them from rank 1 to rank 0 through libfabric and then
//! checks rank 0's memory against the model byte for byte.
//!
//! The wire format is written here from what the network transport documents of it (its
//! "Header" section), not from its code: a message is a 72-byte header
//! (80 with the two-range flag) and a payload. The receiver trusts nothing in it; the model
//! says what it must do with each message:
//! - a write (a put, a signal's payload) lands exactly when the segment id and key are those
//!   of a live segment of the receiver and the whole range lies inside it; two ranges are
//!   applied in turn, up to the first refused;
//! - a signal or atomic changes a word exactly when, in addition, the offset is a multiple
//!   of 8 and the word lies inside; a signal's second word (flag `SET2`) is set first, and a
//!   refused one stops the message;
//! - a refused write of a put or signal is reported back to the sender (the model counts
//!   them; the sender's next quiet reports the first); requests (atomics, descriptions) are
//!   answered or refused to their request id;
//! - anything else (a short, padded or cut message, an unknown kind, a rank that is not a
//!   peer, answers and refusals nobody asked for) is dropped, and changes nothing.

/// The receiver's segment the model tracks (rank 0's target segment).
#[derive(Debug, Clone, Copy)]
pub struct Target {
    /// Its id.
    pub seg: u32,
    /// Its key.
    pub key: u64,
    /// Its length in bytes (a multiple of 8).
    pub len: usize,
}

const HDR: usize = 72;
const NONE: u32 = u32::MAX;
const PUT: u8 = 1;
const SIGNAL: u8 = 2;
const ATOMIC: u8 = 3;
const DESCRIBE: u8 = 4;
const QUIET: u8 = 5;
const ANSWER: u8 = 6;
const REFUSE: u8 = 7;
const REVOKE: u8 = 8;
const SET2: u16 = 1;
const PUT2: u16 = 2;
const OP_SET: u8 = 1;
const OP_ADD: u8 = 2;
const OP_LOAD: u8 = 3;
const OP_SWAP: u8 = 4;
const OP_CAS: u8 = 5;

/// The header's fields, as the documentation lays them out.
#[derive(Debug, Clone, Copy, Default)]
struct Header {
    kind: u8,
    op: u8,
    flags: u16,
    src: u32,
    dst_seg: u32,
    dst_key: u64,
    dst_off: u64,
    sig_seg: u32,
    sig_off2: u32,
    sig_key: u64,
    sig_off: u64,
    value: u64,
    value2: u64,
    dst_off2: u32,
    len1: u32,
}

impl Header {
    /// The message: header (with the two-range extension under `PUT2`), then `payload`; the
    /// length field says `payload.len() + extra` (non-zero: a message that lies about it).
    fn message(&self, payload: &[u8], extra: i64) -> Vec<u8> {
        let len = u32::try_from((payload.len() as i64 + extra).max(0)).unwrap_or(u32::MAX);
        let mut b = Vec::with_capacity(HDR + 8 + payload.len());
        b.push(self.kind);
        b.push(self.op);
        b.extend_from_slice(&self.flags.to_le_bytes());
        b.extend_from_slice(&self.src.to_le_bytes());
        b.extend_from_slice(&len.to_le_bytes());
        b.extend_from_slice(&self.dst_seg.to_le_bytes());
        b.extend_from_slice(&self.dst_key.to_le_bytes());
        b.extend_from_slice(&self.dst_off.to_le_bytes());
        b.extend_from_slice(&self.sig_seg.to_le_bytes());
        b.extend_from_slice(&self.sig_off2.to_le_bytes());
        b.extend_from_slice(&self.sig_key.to_le_bytes());
        b.extend_from_slice(&self.sig_off.to_le_bytes());
        b.extend_from_slice(&self.value.to_le_bytes());
        b.extend_from_slice(&self.value2.to_le_bytes());
        if self.flags & PUT2 != 0 {
            b.extend_from_slice(&self.dst_off2.to_le_bytes());
            b.extend_from_slice(&self.len1.to_le_bytes());
        }
        b.extend_from_slice(payload);
        b
    }
}

/// Generates messages from rank 1 to rank 0 and keeps the model of rank 0's target segment.
#[derive(Debug)]
pub struct Gen {
    rng: u64,
    t: Target,
    /// Another live segment of the receiver, whose key the generator never uses.
    canary: u32,
    /// What the target segment must hold.
    pub image: Vec<u8>,
    /// Writes of puts and signals the receiver must refuse and report to the sender.
    pub refusals: u64,
    /// Messages whose writes the receiver must apply (whole or in part).
    pub applied: u64,
    /// Messages the receiver must drop without a word.
    pub dropped: u64,
    /// Messages generated.
    pub sent: u64,
}

impl Gen {
    /// A generator seeded with `seed`, for target `t` whose bytes are `image` now, beside
    /// the receiver's segment `canary`.
    pub fn new(seed: u64, t: Target, canary: u32, image: Vec<u8>) -> Self {
        assert_eq!(image.len(), t.len);
        Gen {
            rng: (seed ^ 0x9e37_79b9_7f4a_7c15).wrapping_mul(0xbf58_476d_1ce4_e5b9) | 1,
            t,
            canary,
            image,
            refusals: 0,
            applied: 0,
            dropped: 0,
            sent: 0,
        }
    }

    /// xorshift64*: deterministic, so a failing seed replays.
    fn next(&mut self) -> u64 {
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }

    /// A segment id and key, and whether they name the target: mostly the target, else its
    /// id with a key one bit off, the canary with a guessed key, any id, or no segment.
    fn segment(&mut self) -> (u32, u64, bool) {
        match self.below(10) {
            0..=5 => (self.t.seg, self.t.key, true),
            6 => (self.t.seg, self.t.key ^ (1 << self.below(64)), false),
            7 => (self.canary, self.next(), false),
            8 => (self.below(64) as u32, self.next(), false),
            _ => (NONE, self.next(), false),
        }
    }

    /// An offset for `n` bytes: mostly inside, else at the end, past it, or near 2^64.
    fn offset(&mut self, n: usize) -> u64 {
        let len = self.t.len as u64;
        match self.below(10) {
            0..=6 => self.below(len),
            7 => len.saturating_sub(n as u64) + self.below(3),
            8 => len + self.below(100),
            _ => u64::MAX - self.below(16),
        }
    }

    /// A word's offset: mostly aligned inside, else misaligned, at or past the end, or huge.
    fn word(&mut self) -> u64 {
        let len = self.t.len as u64;
        match self.below(10) {
            0..=5 => self.below(len / 8) * 8,
            6 => self.below(len / 8) * 8 + 1 + self.below(7),
            7 => len - 8 + self.below(16),
            8 => len + self.below(64) * 8,
            _ => u64::MAX - 7,
        }
    }

    /// Whether `n` bytes at `off` of segment (`ok`: the target) may be written.
    fn fits(&self, ok: bool, off: u64, n: usize) -> bool {
        ok && usize::try_from(off)
            .ok()
            .and_then(|o| o.checked_add(n))
            .is_some_and(|end| end <= self.t.len)
    }

    fn word_fits(&self, ok: bool, off: u64) -> bool {
        self.fits(ok, off, 8) && off % 8 == 0
    }

    fn read_word(&self, off: u64) -> u64 {
        let o = off as usize;
        u64::from_le_bytes(self.image[o..o + 8].try_into().expect("8 bytes"))
    }

    fn write_word(&mut self, off: u64, v: u64) {
        let o = off as usize;
        self.image[o..o + 8].copy_from_slice(&v.to_le_bytes());
    }

    /// Applies the payload ranges of a put or signal to the model; `false` when one was
    /// refused (the rest of the message is not applied).
    fn apply_ranges(&mut self, h: &Header, payload: &[u8]) -> bool {
        let ranges: Vec<(u64, &[u8])> = if h.flags & PUT2 != 0 {
            let Some((a, b)) = payload.split_at_checked(h.len1 as usize) else {
                self.refusals += 1;
                return false;
            };
            vec![(h.dst_off, a), (u64::from(h.dst_off2), b)]
        } else {
            vec![(h.dst_off, payload)]
        };
        if h.dst_seg == NONE {
            return true;
        }
        let ok = h.dst_seg == self.t.seg && h.dst_key == self.t.key;
        for (off, bytes) in ranges.into_iter().filter(|r| !r.1.is_empty()) {
            if !self.fits(ok, off, bytes.len()) {
                self.refusals += 1;
                return false;
            }
            let o = off as usize;
            self.image[o..o + bytes.len()].copy_from_slice(bytes);
            self.applied += 1;
        }
        true
    }

    /// The next message, with its effect applied to the model.
    pub fn message(&mut self) -> Vec<u8> {
        self.sent += 1;
        let mut h = Header {
            src: 1,
            ..Header::default()
        };
        match self.below(16) {
            // A put of up to 300 bytes, one range or two.
            0..=4 => {
                h.kind = PUT;
                let n = self.below(300) as usize;
                let payload = self.bytes(n);
                (h.dst_seg, h.dst_key, _) = self.segment();
                h.dst_off = self.offset(n);
                if self.below(4) == 0 {
                    h.flags = PUT2;
                    h.len1 = self.below(n as u64 + 20) as u32;
                    let rest = n.saturating_sub(h.len1 as usize);
                    h.dst_off2 = u32::try_from(self.offset(rest)).unwrap_or(u32::MAX);
                }
                self.apply_ranges(&h, &payload);
                h.message(&payload, 0)
            }
            // A signal (set, add or an unknown op), maybe with a payload and a second word.
            5..=7 => {
                h.kind = SIGNAL;
                h.op = [OP_SET, OP_ADD, OP_SET, OP_ADD, 0, 9][self.below(6) as usize];
                let payload = if self.below(3) == 0 {
                    let n = 1 + self.below(64) as usize;
                    (h.dst_seg, h.dst_key, _) = self.segment();
                    h.dst_off = self.offset(n);
                    self.bytes(n)
                } else {
                    h.dst_seg = NONE;
                    Vec::new()
                };
                let (seg, key, ok) = self.segment();
                (h.sig_seg, h.sig_key) = (seg, key);
                h.sig_off = self.word();
                h.value = self.next();
                if self.below(3) == 0 {
                    h.flags |= SET2;
                    h.sig_off2 = u32::try_from(self.word()).unwrap_or(u32::MAX);
                    h.value2 = self.next();
                }
                if self.apply_ranges(&h, &payload) {
                    self.apply_signal(&h, ok);
                }
                h.message(&payload, 0)
            }
            // An atomic request (any op, known or not), answered or refused to its id.
            8..=9 => {
                h.kind = ATOMIC;
                h.op = [OP_LOAD, OP_SET, OP_SWAP, OP_ADD, OP_CAS, OP_CAS, 0, 77]
                    [self.below(8) as usize];
                let (seg, key, ok) = self.segment();
                (h.sig_seg, h.sig_key) = (seg, key);
                h.sig_off = self.word();
                h.dst_off = self.next(); // the request id
                h.value = if h.op == OP_CAS && self.word_fits(ok, h.sig_off) && self.below(2) == 0 {
                    self.read_word(h.sig_off) // a compare-exchange that succeeds
                } else {
                    self.next()
                };
                h.value2 = self.next();
                if self.word_fits(ok, h.sig_off) {
                    let (old, off) = (self.read_word(h.sig_off), h.sig_off);
                    match h.op {
                        OP_SET | OP_SWAP => self.write_word(off, h.value),
                        OP_ADD => self.write_word(off, old.wrapping_add(h.value)),
                        OP_CAS if old == h.value => self.write_word(off, h.value2),
                        _ => {}
                    }
                }
                h.message(&[], 0)
            }
            // Requests and answers that change no memory: a description (right key or not),
            // a quiet, answers and refusals nobody asked for, a revocation.
            10..=11 => {
                h.kind = [DESCRIBE, QUIET, ANSWER, REFUSE, REVOKE][self.below(5) as usize];
                (h.dst_seg, h.dst_key, _) = self.segment();
                h.dst_off = self.next();
                h.value = self.next();
                // A refusal: 0 is one of a write rank 0 never made. An answer: an id among the
                // receiver's next requests' (taken, it would complete one of them wrongly).
                h.value2 = self.below(if h.kind == REFUSE { 3 } else { 1000 });
                self.dropped += u64::from(matches!(h.kind, ANSWER | REFUSE));
                let n = self.below(40) as usize;
                let text = self.bytes(n);
                h.message(&text, 0)
            }
            // A well-formed put that lies about its length, names no peer or itself, or is
            // of an unknown kind: dropped.
            12..=13 => {
                h.kind = PUT;
                (h.dst_seg, h.dst_key, _) = (self.t.seg, self.t.key, true);
                h.dst_off = self.below(self.t.len as u64 - 16);
                let payload = self.bytes(16);
                let extra = match self.below(4) {
                    0 => {
                        h.src = [0, 2, u32::MAX][self.below(3) as usize];
                        0
                    }
                    1 => {
                        h.kind = [0, 9, 200][self.below(3) as usize];
                        0
                    }
                    2 => 1 << 40, // below: the flag of two ranges, without their extension
                    _ => [-1, 1, 100, -16][self.below(4) as usize],
                };
                self.dropped += 1;
                if extra == 1 << 40 {
                    let mut m = h.message(&payload, 0);
                    m[2..4].copy_from_slice(&PUT2.to_le_bytes());
                    return m;
                }
                h.message(&payload, extra)
            }
            // Bytes: too short for a header, or a header's length of noise.
            _ => {
                self.dropped += 1;
                let n = if self.below(2) == 0 {
                    self.below(HDR as u64) as usize
                } else {
                    HDR + self.below(100) as usize
                };
                let mut m = self.bytes(n);
                if n >= HDR {
                    m[0] = 1 + self.below(8) as u8; // a known kind
                    m[4..8].copy_from_slice(&1u32.to_le_bytes());
                    m[8..12].copy_from_slice(&u32::MAX.to_le_bytes()); // a length it lacks
                }
                m
            }
        }
    }

    /// The signal words of a signal message whose ranges were applied (`ok`: the signal
    /// segment is the target).
    fn apply_signal(&mut self, h: &Header, ok: bool) {
        if h.flags & SET2 != 0 {
            let off2 = u64::from(h.sig_off2);
            if !self.word_fits(ok, off2) {
                self.refusals += 1;
                return;
            }
            self.write_word(off2, h.value2);
        }
        if !matches!(h.op, OP_SET | OP_ADD) || !self.word_fits(ok, h.sig_off) {
            self.refusals += 1;
            return;
        }
        let old = self.read_word(h.sig_off);
        let v = if h.op == OP_SET {
            h.value
        } else {
            old.wrapping_add(h.value)
        };
        self.write_word(h.sig_off, v);
        self.applied += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_keep_the_model_inside_the_target_and_reach_every_outcome() {
        let t = Target {
            seg: 3,
            key: 0xfeed,
            len: 4096,
        };
        let mut g = Gen::new(7, t, 4, vec![0; 4096]);
        for _ in 0..5000 {
            let m = g.message();
            assert!(m.len() <= HDR + 8 + 400, "{}", m.len());
        }
        assert_eq!(g.image.len(), 4096);
        assert!(
            g.refusals > 100 && g.applied > 100 && g.dropped > 100,
            "{g:?}"
        );
        assert!(g.image.iter().any(|&b| b != 0));
        // The same seed, the same messages.
        let (mut a, mut b) = (
            Gen::new(9, t, 4, vec![0; 4096]),
            Gen::new(9, t, 4, vec![0; 4096]),
        );
        for _ in 0..100 {
            assert_eq!(a.message(), b.message());
        }
    }
}
