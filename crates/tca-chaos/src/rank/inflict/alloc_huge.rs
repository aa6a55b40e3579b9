//! `alloc-huge`: a segment of twice the machine's memory, then one of 1 PiB.
//!
//! Why: a size computed wrongly (an overflowed product, a unit mix-up) reaches `alloc`
//! sooner or later, and the answer must be an error the program can act on, never a crash
//! or a half-made segment that breaks the rank's later calls.
//!
//! What the library does (measured, Linux, overcommit heuristic): a segment is a sealed memfd
//! mapped shared, and memory is committed page by page when touched, as for `malloc`. So
//! twice the memory *succeeds*: the address space is reserved and nothing else. We then
//! write and read back its last byte only (one page), and free it. 1 PiB exceeds the
//! 47-bit user address space: `mmap` fails and the library returns a `Transport` error
//! naming the size, with the memfd closed again. Either way the rank goes on and the job
//! must complete with every result verified: a failed allocation must leave the world
//! usable. (Touching all of a segment larger than memory would end in the OOM killer or
//! SIGBUS, as with any lazily committed memory; that is not tried here.)

use tca::{ErrorKind, World};

use super::super::{Answer, Step, check};

/// Bytes of physical memory (`MemTotal`), or 24 GiB if it cannot be read.
fn memory_bytes() -> usize {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            let kb: u64 = m
                .lines()
                .find(|l| l.starts_with("MemTotal:"))?
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            usize::try_from(kb.checked_mul(1024)?).ok()
        })
        .unwrap_or(24 << 30)
}

fn gib(n: usize) -> String {
    format!("{:.1} GiB", n as f64 / f64::from(1u32 << 30))
}

pub(super) fn inflict(world: &World, answer: &mut Answer) -> Step {
    answer.inflicted = true;
    let sizes = [memory_bytes().saturating_mul(2), 1usize << 50];
    for len in sizes {
        match world.alloc(len) {
            Ok(seg) => {
                let last = len - 1;
                seg.write(last, &[0xa5])?;
                let mut back = [0u8];
                seg.read(last, &mut back)?;
                check(back[0] == 0xa5, || {
                    format!(
                        "alloc-huge: the last byte of a {} segment did not read back",
                        gib(len)
                    )
                })?;
                answer.notes.push(format!(
                    "alloc {}: succeeded (committed lazily; last byte written and read back)",
                    gib(len)
                ));
            }
            Err(e) => {
                answer
                    .notes
                    .push(format!("alloc {}: {:?} error: {e}", gib(len), e.kind()));
                // The library's allocation error is Transport (the mapping failed); any other
                // kind is not the answer.
                if e.kind() != ErrorKind::Transport {
                    answer.unexpected.push(format!("alloc {}", gib(len)));
                }
            }
        }
    }
    Ok(())
}
