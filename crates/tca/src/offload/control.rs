//! Control requests: what a rank asks of its proxy that is neither an operation nor memory,
//! as a line of text, so that it crosses to the node proxy process as it is (the seed's
//! command channel). One parser for both kinds of proxy ([`Proxy::control`]).
//!
//! | request | reply |
//! |---|---|
//! | `transport` | the rank's transport (`shm`, `ofi`, ...) |
//! | `force COLLECTIVE NAME` | empty; the communicator's [`Comm::force`] (`auto`: back to automatic selection) |
//! | `algorithm COLLECTIVE BYTES` | the algorithm a call of that many bytes would use now ([`Comm::algorithm`]) |
//! | `single-copy-calls` | how many collectives went single-copy so far ([`Comm::single_copy_calls`]) |

use crate::coll::{Collective, Comm};
use crate::error::{Error, ErrorKind, Result};

#[cfg(doc)]
use super::Proxy;

/// The longest reply, in bytes.
pub const REPLY_MAX: usize = 1024;

/// Runs `request` on `c` and returns the reply.
pub(crate) fn run(c: &Comm<'_>, request: &str) -> Result<String> {
    let bad = |m: String| Error::new(ErrorKind::InvalidArgument, m);
    let words: Vec<&str> = request.split_whitespace().collect();
    let collective = |w: Option<&&str>| {
        let name = w.copied().unwrap_or("");
        Collective::from_name(name).ok_or_else(|| {
            bad(format!(
                "no collective called `{name}` (one of {})",
                Collective::ALL.map(Collective::name).join(", ")
            ))
        })
    };
    match words.first().copied() {
        Some("transport") if words.len() == 1 => Ok(c.world_ref().transport().to_string()),
        Some("single-copy-calls") if words.len() == 1 => Ok(c.single_copy_calls().to_string()),
        Some("force") if words.len() == 3 => {
            let name = (words[2] != "auto").then_some(words[2]);
            c.force(collective(words.get(1))?, name)?;
            Ok(String::new())
        }
        Some("algorithm") if words.len() == 3 => {
            let bytes = words[2]
                .parse()
                .map_err(|_| bad(format!("`{}` is not a number of bytes", words[2])))?;
            Ok(c.algorithm(collective(words.get(1))?, bytes)
                .name
                .to_string())
        }
        _ => Err(bad(format!(
            "unknown control request `{request}`: `transport`, `force COLLECTIVE NAME|auto`, \
             `algorithm COLLECTIVE BYTES` or `single-copy-calls`"
        ))),
    }
}
