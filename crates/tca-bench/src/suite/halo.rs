//! The halo exchange in QUDA's shape (seed 003's application): a 4-D lattice split over the
//! ranks by a process grid, each rank exchanging its boundary faces with its two neighbours in
//! every partitioned dimension (up to 8), through persistent requests set up once.
//!
//! What one exchange moves is what QUDA's Wilson-Dslash moves in single precision: one ghost
//! layer per face of half spinors, [`SITE_BYTES`] per site, so a face of dimension `d` is the
//! local volume over the local extent in `d`, times 48 bytes. Like QUDA, unpartitioned
//! dimensions exchange nothing (the rank is its own neighbour there and the kernel reads its
//! own sites); faces are pre-packed, so the time is the communication alone.
//!
//! The process grid is chosen as QUDA's users usually choose it: the rank count's prime
//! factors, largest first, each splitting the dimension with the largest local extent that it
//! divides, T before Z before Y before X on ties (time is the long dimension of lattice QCD).

use anyhow::{Result, bail};

/// Bytes per face site: a half spinor (2 spins x 3 colours, complex) in single precision.
pub const SITE_BYTES: usize = 48;

/// One halo configuration: the global lattice over `p` ranks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Halo {
    /// Global extents X, Y, Z, T.
    pub global: [usize; 4],
    /// Ranks per dimension.
    pub grid: [usize; 4],
    /// Each rank's extents.
    pub local: [usize; 4],
}

/// One message of an exchange, seen from one rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Face {
    /// The dimension (0..4: X, Y, Z, T).
    pub dim: usize,
    /// The neighbour this rank sends its face to.
    pub to: u32,
    /// The neighbour this rank receives the matching ghost from.
    pub from: u32,
    /// Tag of both: `2*dim` for the forward direction, `2*dim + 1` backward.
    pub tag: i32,
    /// Bytes of the face (and of the ghost).
    pub bytes: usize,
}

/// Parses `16x16x16x32` (four extents, each at least 1).
pub fn parse_lattice(s: &str) -> Result<[usize; 4]> {
    let parts: Vec<&str> = s.trim().split(['x', 'X']).collect();
    if parts.len() != 4 {
        bail!("lattice `{s}`: expected four extents XxYxZxT, like 16x16x16x32");
    }
    let mut out = [0usize; 4];
    for (o, t) in out.iter_mut().zip(&parts) {
        *o = match t.parse::<usize>() {
            Ok(n) if (1..=1 << 16).contains(&n) => n,
            _ => bail!("lattice `{s}`: extent `{t}` is not a whole number from 1 to 65536"),
        };
    }
    Ok(out)
}

/// Parses a comma-separated list of lattices.
pub fn parse_lattices(s: &str) -> Result<Vec<[usize; 4]>> {
    s.split(',').map(parse_lattice).collect()
}

fn prime_factors(mut p: usize) -> Vec<usize> {
    let mut f = Vec::new();
    let mut k = 2;
    while k * k <= p {
        while p % k == 0 {
            f.push(k);
            p /= k;
        }
        k += 1;
    }
    if p > 1 {
        f.push(p);
    }
    f.reverse();
    f
}

impl Halo {
    /// Splits `global` over `p` ranks (see the module docs), or says why it cannot.
    pub fn new(global: [usize; 4], p: u32) -> Result<Self> {
        let mut grid = [1usize; 4];
        for f in prime_factors(p as usize) {
            let best = (0..4)
                .rev()
                .filter(|&d| (global[d] / grid[d]) % f == 0)
                .max_by_key(|&d| (global[d] / grid[d], d));
            match best {
                Some(d) => grid[d] *= f,
                None => bail!(
                    "lattice {} cannot be split over {p} ranks: no extent left that {f} divides",
                    show(&global)
                ),
            }
        }
        let local = std::array::from_fn(|d| global[d] / grid[d]);
        let sites: usize = global.iter().product::<usize>() / p as usize;
        if sites.checked_mul(SITE_BYTES).is_none_or(|b| b > 1 << 30) {
            bail!(
                "lattice {}: {sites} sites per rank is more than this benchmark holds",
                show(&global)
            );
        }
        Ok(Self {
            global,
            grid,
            local,
        })
    }

    /// The rank at grid coordinates `c` (X fastest).
    fn rank_at(&self, c: [usize; 4]) -> u32 {
        (c[0] + self.grid[0] * (c[1] + self.grid[1] * (c[2] + self.grid[2] * c[3]))) as u32
    }

    fn coords(&self, r: u32) -> [usize; 4] {
        let mut r = r as usize;
        std::array::from_fn(|d| {
            let c = r % self.grid[d];
            r /= self.grid[d];
            c
        })
    }

    /// Bytes of the face in dimension `d`.
    pub fn face_bytes(&self, d: usize) -> usize {
        self.local.iter().product::<usize>() / self.local[d] * SITE_BYTES
    }

    /// The messages rank `r` sends (and the ghosts it receives) in one exchange: forward then
    /// backward, for every partitioned dimension.
    pub fn faces(&self, r: u32) -> Vec<Face> {
        let c = self.coords(r);
        let mut v = Vec::new();
        for d in (0..4).filter(|&d| self.grid[d] > 1) {
            let step = |k: usize| {
                let mut n = c;
                n[d] = (c[d] + k) % self.grid[d];
                self.rank_at(n)
            };
            let (fwd, bwd) = (step(1), step(self.grid[d] - 1));
            let bytes = self.face_bytes(d);
            v.push(Face {
                dim: d,
                to: fwd,
                from: bwd,
                tag: 2 * d as i32,
                bytes,
            });
            v.push(Face {
                dim: d,
                to: bwd,
                from: fwd,
                tag: 2 * d as i32 + 1,
                bytes,
            });
        }
        v
    }

    /// Bytes one rank sends per exchange (and receives: the grid is periodic).
    pub fn bytes_per_exchange(&self) -> usize {
        self.faces(0).iter().map(|f| f.bytes).sum()
    }

    /// `16x16x16x32 on 1x1x1x2`.
    pub fn describe(&self) -> String {
        format!("{} on {}", show(&self.global), show(&self.grid))
    }
}

/// One rank's messages of a lattice and their buffers: a face to send and a ghost to receive
/// per message, allocated once. Each rank fills its faces with its rank number, so
/// [`Buffers::check`] can tell a correct exchange from a wrong one.
#[derive(Debug)]
pub struct Buffers {
    /// The lattice.
    pub halo: Halo,
    /// This rank's messages.
    pub faces: Vec<Face>,
    /// The face sent by each message.
    pub send: Vec<Vec<u8>>,
    /// The ghost each message's counterpart fills.
    pub ghost: Vec<Vec<u8>>,
}

impl Buffers {
    /// Rank `r`'s messages and buffers.
    pub fn new(halo: &Halo, r: u32) -> Self {
        let faces = halo.faces(r);
        Self {
            halo: halo.clone(),
            send: faces.iter().map(|f| vec![r as u8; f.bytes]).collect(),
            ghost: faces.iter().map(|f| vec![0; f.bytes]).collect(),
            faces,
        }
    }

    /// Checks that every ghost holds its sender's face: a halo that measured a wrong exchange
    /// says so instead of reporting a time.
    pub fn check(&self) -> Result<()> {
        for (f, g) in self.faces.iter().zip(&self.ghost) {
            let want = f.from as u8;
            if let Some(i) = g.iter().position(|&b| b != want) {
                bail!(
                    "halo: ghost of dimension {} (tag {}) from rank {} holds {} at byte {i}, expected {want}",
                    f.dim,
                    f.tag,
                    f.from,
                    g[i]
                );
            }
        }
        Ok(())
    }
}

fn show(v: &[usize; 4]) -> String {
    format!("{}x{}x{}x{}", v[0], v[1], v[2], v[3])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grids_split_the_longest_extent_first() {
        let h = Halo::new([16, 16, 16, 32], 2).unwrap();
        assert_eq!(h.grid, [1, 1, 1, 2]);
        assert_eq!(h.local, [16, 16, 16, 16]);
        assert_eq!(h.face_bytes(3), 16 * 16 * 16 * 48);
        let h = Halo::new([16, 16, 16, 32], 16).unwrap();
        assert_eq!(h.grid, [1, 2, 2, 4]);
        let h = Halo::new([16, 16, 16, 16], 16).unwrap();
        assert_eq!(h.grid, [2, 2, 2, 2]);
        assert_eq!(h.faces(5).len(), 8, "8 neighbours, 2 per dimension");
        let h = Halo::new([8, 8, 8, 8], 8).unwrap();
        assert_eq!(h.grid, [1, 2, 2, 2]);
        let h = Halo::new([24, 24, 24, 48], 6).unwrap();
        assert_eq!(h.grid.iter().product::<usize>(), 6);
        assert_eq!(h.local.iter().product::<usize>() * 6, 24 * 24 * 24 * 48);
        assert!(Halo::new([5, 5, 5, 5], 2).is_err());
        assert!(Halo::new([4, 4, 4, 4], 3).is_err());
    }

    #[test]
    fn neighbours_pair_up() {
        for p in [2u32, 4, 8, 16] {
            let h = Halo::new([8, 8, 8, 16], p).unwrap();
            let split = h.grid.iter().filter(|&&g| g > 1).count();
            for r in 0..p {
                let faces = h.faces(r);
                assert_eq!(faces.len(), 2 * split);
                // Whatever r sends with a tag, its target receives from r with that tag.
                for f in &faces {
                    assert!(
                        h.faces(f.to).iter().any(|g| g.from == r && g.tag == f.tag),
                        "p={p} r={r} {f:?}"
                    );
                }
            }
        }
        let h = Halo::new([16, 16, 16, 32], 2).unwrap();
        assert_eq!(h.bytes_per_exchange(), 2 * 16 * 16 * 16 * 48);
        assert_eq!(h.describe(), "16x16x16x32 on 1x1x1x2");
    }

    #[test]
    fn lattices_parse() {
        assert_eq!(parse_lattice("16x16x16x32").unwrap(), [16, 16, 16, 32]);
        assert_eq!(
            parse_lattices("4x4x4x4,8X8X8X8").unwrap(),
            vec![[4; 4], [8; 4]]
        );
        for bad in ["16x16x16", "0x4x4x4", "ax4x4x4", "", "4x4x4x4x4"] {
            assert!(parse_lattice(bad).is_err(), "{bad}");
        }
    }
}
