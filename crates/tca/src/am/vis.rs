//! Vector, indexed and strided transfers (GASNet's VIS): descriptions cut into contiguous
//! pieces, pieces sent segment to segment or packed through the request ring.

use crate::error::{Error, ErrorKind, Result};

use super::core::{GET, NBI_PUTS, Net, PUT_PACKED, op_index};
use super::{Endpoint, rank};

/// Most dimensions of a strided description.
pub const MAX_DIMS: usize = 8;

/// GASNet-EX's strided description (`gex_VIS_Strided*`): `count[k]` elements of `elem` bytes
/// along dimension `k`, `remote_strides[k]` bytes apart on the remote side and
/// `local_strides[k]` on the local side; dimension 0 varies fastest. Element `(i0, i1, ...)`
/// is at `base + i0*stride[0] + i1*stride[1] + ...` on each side.
///
/// A 3-D array's face, for instance, is `elem = 8, count = [nx, ny]`, remote strides
/// `[8, 8*nx*ny]` (an x-z face of an x-fastest `nx*ny*nz` array) and local strides `[8, 8*nx]`
/// (packed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Strided<'a> {
    /// Bytes per element.
    pub elem: usize,
    /// Elements per dimension.
    pub count: &'a [usize],
    /// Byte distance between neighbours along each dimension, remote side.
    pub remote_strides: &'a [usize],
    /// The same, local side.
    pub local_strides: &'a [usize],
}

fn bad(msg: String) -> Error {
    Error::new(ErrorKind::InvalidArgument, msg)
}

impl Strided<'_> {
    fn check(&self) -> Result<()> {
        let d = self.count.len();
        if d == 0 || d > MAX_DIMS {
            return Err(bad(format!(
                "a strided description has 1 to {MAX_DIMS} dimensions, got {d}"
            )));
        }
        if self.remote_strides.len() != d || self.local_strides.len() != d {
            return Err(bad(format!(
                "{d} counts need {d} strides on each side, got {} remote and {} local",
                self.remote_strides.len(),
                self.local_strides.len()
            )));
        }
        Ok(())
    }

    /// Whether the description moves nothing.
    fn empty(&self) -> bool {
        self.elem == 0 || self.count.contains(&0)
    }

    /// Bytes the description moves.
    pub fn bytes(&self) -> Option<usize> {
        self.count
            .iter()
            .try_fold(self.elem, |n, &c| n.checked_mul(c))
    }

    /// Bytes spanned on one side (from the first byte of the first element to the last byte
    /// of the last), or `None` on overflow.
    fn extent(&self, strides: &[usize]) -> Option<usize> {
        if self.empty() {
            return Some(0);
        }
        self.count
            .iter()
            .zip(strides)
            .try_fold(self.elem, |n, (&c, &s)| {
                n.checked_add((c - 1).checked_mul(s)?)
            })
    }

    /// Visits the contiguous pieces in order: (remote offset, local offset, length), both
    /// relative to their bases. Dimensions whose strides continue the run on both sides are
    /// merged into it.
    fn pieces(&self, mut f: impl FnMut(usize, usize, usize) -> Result<()>) -> Result<()> {
        if self.empty() {
            return Ok(());
        }
        let d = self.count.len();
        let (rs, ls) = (self.remote_strides, self.local_strides);
        let mut run = self.elem;
        let mut k = 0;
        while k < d && rs[k] == run && ls[k] == run {
            run *= self.count[k];
            k += 1;
        }
        let mut idx = [0usize; MAX_DIMS];
        loop {
            let (mut r, mut l) = (0, 0);
            for j in k..d {
                r += idx[j] * rs[j];
                l += idx[j] * ls[j];
            }
            f(r, l, run)?;
            let mut j = k;
            loop {
                if j == d {
                    return Ok(());
                }
                idx[j] += 1;
                if idx[j] < self.count[j] {
                    break;
                }
                idx[j] = 0;
                j += 1;
            }
        }
    }
}

/// Walks remote pieces against local buffers of other boundaries: calls `f(remote offset,
/// local buffer, offset in it, length)` for each stretch where both are contiguous. The
/// totals must be equal (checked by the caller).
fn zip_pieces(
    remote: impl Iterator<Item = (usize, usize)>,
    local: &[usize],
    mut f: impl FnMut(usize, usize, usize, usize) -> Result<()>,
) -> Result<()> {
    let (mut li, mut lo) = (0, 0);
    for (mut off, mut len) in remote {
        while len > 0 {
            while local[li] == lo {
                (li, lo) = (li + 1, 0);
            }
            let k = len.min(local[li] - lo);
            f(off, li, lo, k)?;
            (off, len, lo) = (off + k, len - k, lo + k);
        }
    }
    Ok(())
}

fn totals(remote: usize, local: usize) -> Result<()> {
    if remote != local {
        return Err(bad(format!(
            "the remote pieces hold {remote} bytes and the local ones {local}: they must be equal"
        )));
    }
    Ok(())
}

fn sum(mut it: impl Iterator<Item = usize>) -> Result<usize> {
    it.try_fold(0usize, |a, n| a.checked_add(n))
        .ok_or_else(|| bad("the pieces' lengths overflow".to_string()))
}

impl Endpoint<'_, '_> {
    /// Checks a strided description against `to`'s segment at `off` and a local buffer of
    /// `local` bytes; nothing moves if any part is outside.
    fn check_strided(&self, q: usize, off: usize, s: &Strided<'_>, local: usize) -> Result<()> {
        s.check()?;
        let total = s
            .bytes()
            .ok_or_else(|| bad("the strided description's size overflows".to_string()))?;
        if total > self.core.segs[q].len() {
            // Only overlapping strides get here (distinct elements fit the extent checked
            // below): refused rather than walked or staged for that many bytes.
            return Err(bad(format!(
                "the strided description moves {total} bytes, more than communicator rank \
                 {q}'s segment of {} holds (overlapping strides)",
                self.core.segs[q].len()
            )));
        }
        let r = s
            .extent(s.remote_strides)
            .ok_or_else(|| bad("the strided description's remote extent overflows".into()))?;
        self.core.check_range(q, off, r)?;
        let l = s
            .extent(s.local_strides)
            .ok_or_else(|| bad("the strided description's local extent overflows".into()))?;
        if l > local {
            return Err(Error::new(
                ErrorKind::OutOfBounds,
                format!("the strided description spans {l} local bytes, the buffer has {local}"),
            ));
        }
        Ok(())
    }

    /// Strided put of `src` (local side) into `to`'s segment at `off` (remote side);
    /// returns when every byte is at the target.
    pub fn put_strided(&self, to: u32, off: usize, s: &Strided<'_>, src: &[u8]) -> Result<()> {
        self.put_strided_nbi(to, off, s, src)?;
        self.wait_syncnbi_puts()
    }

    /// Starts a strided put, completed by [`Endpoint::wait_syncnbi_puts`].
    pub fn put_strided_nbi(&self, to: u32, off: usize, s: &Strided<'_>, src: &[u8]) -> Result<()> {
        self.outside("a put")?;
        let q = rank(self.core, to)?;
        self.check_strided(q, off, s, src.len())?;
        self.put_pieces(q, |f| s.pieces(|r, l, n| f(off + r, &src[l..l + n])))
    }

    /// Strided put from this rank's segment at `local_off` (local side) into `to`'s segment
    /// at `off` (remote side): the seed's MtoM mode, every piece segment to segment (one copy),
    /// as one chain of puts. The chain is built and checked on the first call and kept by the
    /// description (the seed's descriptor cache), so a repeated transfer does no set-up work:
    /// one lookup, then the copies. Returns when every byte is at the target.
    pub fn put_strided_from(
        &self,
        to: u32,
        off: usize,
        s: &Strided<'_>,
        local_off: usize,
    ) -> Result<()> {
        self.put_strided_from_nbi(to, off, s, local_off)?;
        self.wait_syncnbi_puts()
    }

    /// Starts [`Endpoint::put_strided_from`], completed by [`Endpoint::wait_syncnbi_puts`].
    pub fn put_strided_from_nbi(
        &self,
        to: u32,
        off: usize,
        s: &Strided<'_>,
        local_off: usize,
    ) -> Result<()> {
        self.outside("a put")?;
        let q = rank(self.core, to)?;
        let c = self.core;
        let local = c.seg.len().checked_sub(local_off).ok_or_else(|| {
            Error::new(
                ErrorKind::OutOfBounds,
                format!(
                    "local offset {local_off} is past this rank's segment of {} bytes",
                    c.seg.len()
                ),
            )
        })?;
        self.check_strided(q, off, s, local)?;
        // The key: destination, both offsets, element, then counts and both strides.
        let d = s.count.len();
        let mut key = [0u64; 5 + 3 * MAX_DIMS];
        key[..5].copy_from_slice(&[
            q as u64,
            off as u64,
            local_off as u64,
            s.elem as u64,
            d as u64,
        ]);
        for (k, v) in s
            .count
            .iter()
            .chain(s.remote_strides)
            .chain(s.local_strides)
            .enumerate()
        {
            key[5 + k] = *v as u64;
        }
        let w = self.w();
        let chain = c.chain(&key[..5 + 3 * d], || {
            let mut b = Some(w.chain());
            s.pieces(|r, l, n| {
                let next =
                    b.take()
                        .expect("held")
                        .put(&c.seg, local_off + l, &c.segs[q], off + r, n);
                b = Some(next);
                Ok(())
            })?;
            b.take().expect("held").build()
        })?;
        w.start(&chain)
    }

    /// Puts `len` bytes of this rank's segment at `local_off` into `to`'s segment at `off`,
    /// segment to segment ([`Endpoint::put_from_mode`]: across a network an RMA write
    /// straight from the segment, no copy on either side), through the descriptor cache as
    /// [`Endpoint::put_strided_from`]. Returns when the bytes are at the target.
    pub fn put_from(&self, to: u32, off: usize, local_off: usize, len: usize) -> Result<()> {
        self.put_from_nbi(to, off, local_off, len)?;
        self.wait_syncnbi_puts()
    }

    /// Starts [`Endpoint::put_from`], completed by [`Endpoint::wait_syncnbi_puts`].
    pub fn put_from_nbi(&self, to: u32, off: usize, local_off: usize, len: usize) -> Result<()> {
        let one = [len];
        let s = Strided {
            elem: len,
            count: &[1],
            remote_strides: &one,
            local_strides: &one,
        };
        self.put_strided_from_nbi(to, off, &s, local_off)
    }

    /// Chains in the descriptor cache of [`Endpoint::put_strided_from`].
    pub fn cached_descriptors(&self) -> usize {
        self.core.cached_chains()
    }

    /// Strided get from `from`'s segment at `off` (remote side) into `dst` (local side).
    pub fn get_strided(
        &self,
        from: u32,
        off: usize,
        s: &Strided<'_>,
        dst: &mut [u8],
    ) -> Result<()> {
        self.outside("a get")?;
        let q = rank(self.core, from)?;
        self.check_strided(q, off, s, dst.len())?;
        let total = s.bytes().expect("checked");
        self.get_pieces(
            q,
            total,
            |f| s.pieces(|r, _, n| f(off + r, n)),
            |stash| {
                let mut at = 0;
                s.pieces(|_, l, n| {
                    dst[l..l + n].copy_from_slice(&stash[at..at + n]);
                    at += n;
                    Ok(())
                })
            },
        )
    }

    /// Vector put: the bytes of `src` (in order) into the `(offset, length)` pieces of `to`'s
    /// segment (in order); the totals must be equal.
    pub fn put_vector(&self, to: u32, remote: &[(usize, usize)], src: &[&[u8]]) -> Result<()> {
        self.put_vector_nbi(to, remote, src)?;
        self.wait_syncnbi_puts()
    }

    /// Starts a vector put, completed by [`Endpoint::wait_syncnbi_puts`].
    pub fn put_vector_nbi(&self, to: u32, remote: &[(usize, usize)], src: &[&[u8]]) -> Result<()> {
        self.put_list(to, remote.iter().copied(), src)
    }

    /// Indexed put: pieces of `len` bytes at each offset of `remote` in `to`'s segment.
    pub fn put_indexed(&self, to: u32, remote: &[usize], len: usize, src: &[&[u8]]) -> Result<()> {
        self.put_list(to, remote.iter().map(|&o| (o, len)), src)?;
        self.wait_syncnbi_puts()
    }

    fn put_list(
        &self,
        to: u32,
        remote: impl Iterator<Item = (usize, usize)> + Clone,
        src: &[&[u8]],
    ) -> Result<()> {
        self.outside("a put")?;
        let q = rank(self.core, to)?;
        let lens: Vec<usize> = src.iter().map(|s| s.len()).collect();
        totals(
            sum(remote.clone().map(|p| p.1))?,
            sum(lens.iter().copied())?,
        )?;
        for (o, n) in remote.clone() {
            self.core.check_range(q, o, n)?;
        }
        self.put_pieces(q, |f| {
            zip_pieces(remote, &lens, |r, li, lo, n| f(r, &src[li][lo..lo + n]))
        })
    }

    /// Vector get: the `(offset, length)` pieces of `from`'s segment, in order, into the
    /// `dst` buffers, in order; the totals must be equal.
    pub fn get_vector(
        &self,
        from: u32,
        remote: &[(usize, usize)],
        dst: &mut [&mut [u8]],
    ) -> Result<()> {
        self.get_list(from, remote.iter().copied(), dst)
    }

    /// Indexed get: pieces of `len` bytes at each offset of `remote` in `from`'s segment.
    pub fn get_indexed(
        &self,
        from: u32,
        remote: &[usize],
        len: usize,
        dst: &mut [&mut [u8]],
    ) -> Result<()> {
        self.get_list(from, remote.iter().map(|&o| (o, len)), dst)
    }

    fn get_list(
        &self,
        from: u32,
        remote: impl Iterator<Item = (usize, usize)> + Clone,
        dst: &mut [&mut [u8]],
    ) -> Result<()> {
        self.outside("a get")?;
        let q = rank(self.core, from)?;
        let lens: Vec<usize> = dst.iter().map(|s| s.len()).collect();
        let total = sum(remote.clone().map(|p| p.1))?;
        totals(total, sum(lens.iter().copied())?)?;
        for (o, n) in remote.clone() {
            self.core.check_range(q, o, n)?;
        }
        let walk = remote.clone();
        self.get_pieces(
            q,
            total,
            |f| remote.clone().try_for_each(|(o, n)| f(o, n)),
            |stash| {
                let mut at = 0;
                zip_pieces(walk, &lens, |_, li, lo, n| {
                    dst[li][lo..lo + n].copy_from_slice(&stash[at..at + n]);
                    at += n;
                    Ok(())
                })
            },
        )
    }

    /// Sends pieces (remote offset, local bytes), all checked already: long ones segment to
    /// segment, short ones packed into request packets counted on the implicit-put slot.
    fn put_pieces(
        &self,
        q: usize,
        visit: impl FnOnce(&mut dyn FnMut(usize, &[u8]) -> Result<()>) -> Result<()>,
    ) -> Result<()> {
        let (w, eng, c) = (self.w(), self.eng(), self.core);
        let room = c.room(1);
        let mut buf = c.take_scratch();
        buf.clear();
        let flush = |buf: &mut Vec<u8>| -> Result<()> {
            if buf.is_empty() {
                return Ok(());
            }
            c.with_op(NBI_PUTS, |op| op.acks_left += 1);
            let r = c.send(
                w,
                eng,
                Net::Request,
                q,
                PUT_PACKED,
                0,
                &[u64::from(NBI_PUTS)],
                buf,
            );
            if r.is_err() {
                c.with_op(NBI_PUTS, |op| op.acks_left -= 1);
            }
            buf.clear();
            r
        };
        let r = visit(&mut |off, bytes| {
            if bytes.len() >= c.pack[q].get() {
                return w.put(&c.segs[q], off, bytes);
            }
            if buf.len() + 16 + bytes.len() > room {
                flush(&mut buf)?;
            }
            buf.extend_from_slice(&(off as u64).to_le_bytes());
            buf.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
            buf.extend_from_slice(bytes);
            Ok(())
        })
        .and_then(|()| flush(&mut buf));
        c.give_scratch(buf);
        r
    }

    /// Gets pieces (remote offset, length), all checked already, as one request whose
    /// answer streams them back in order; `unpack` places the gathered bytes.
    fn get_pieces(
        &self,
        q: usize,
        total: usize,
        visit: impl FnOnce(&mut dyn FnMut(usize, usize) -> Result<()>) -> Result<()>,
        unpack: impl FnOnce(&[u8]) -> Result<()>,
    ) -> Result<()> {
        if total == 0 {
            return Ok(());
        }
        let (w, eng, c) = (self.w(), self.eng(), self.core);
        // The piece list goes out in the endpoint's reused scratch buffer.
        let mut list = c.take_scratch();
        list.clear();
        let listed = visit(&mut |off, n| {
            if n > 0 {
                list.extend_from_slice(&(off as u64).to_le_bytes());
                list.extend_from_slice(&(n as u64).to_le_bytes());
            }
            Ok(())
        });
        let id = c.op_alloc(q, total, total);
        let op = op_index(id);
        let sent = listed.and_then(|()| c.send(w, eng, Net::Request, q, GET, 0, &[id, 0], &list));
        c.give_scratch(list);
        if let Err(e) = sent {
            c.with_op(op, |o| o.bytes_left = 0);
            let _ = c.op_finish(op, |_, _| Ok(()));
            return Err(e);
        }
        let waited = c.wait_op(w, eng, op);
        let done = c.op_finish(op, |stash, _| match &waited {
            Ok(()) => unpack(&stash[..total]),
            Err(_) => Ok(()),
        });
        waited.and(done)
    }
}
