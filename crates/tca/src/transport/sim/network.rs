//! The network models of the simulated transport: what a put costs, read from a data file.
//!
//! A model is a TOML file (the named ones ship in `crates/tca/networks/`, each parameter with
//! its source in a comment): a topology (an N-dimensional torus with fixed dimension-order
//! minimal routing, or a two-level fat tree with deterministic up-link choice), link and port
//! bandwidths, latencies, the sender's software cost per operation, the write modes (PIO for
//! small CPU stores, DMA for the rest) and the compute rates that price reductions.
//!
//! # How one message is priced
//!
//! A message of `n` bytes from node `a` to node `b`, issued when the sender's clock reads `t`:
//!
//! 1. The sender's CPU is busy for `software.put_ns` plus the mode's issue cost (PIO: the
//!    stores, `n / pio.gbs`; DMA: `dma.descriptor_ns`); the message is ready at `t + o`.
//! 2. Its route is a list of resources: every link of the route, one injection port of `a`
//!    and one ejection port of `b` (of `ports_per_node` each). It streams over all of them at
//!    the slowest one's bandwidth `B` (link, port, mode, endpoint read rate).
//! 3. It starts when it is ready and every resource is free: `s = max(ready, free_at(r))`, and
//!    holds each resource for `setup + n / B` (`setup`: `dma.setup_ns` for a DMA message, the
//!    hardware's start of a transfer, 0 unless the model sets it): two messages that share a
//!    link take twice the time of one (the link serialises them in the order they were
//!    issued). A resource is free from one time on (no gaps are filled), so each port is
//!    chosen once the links have said when the message can go: one free by then, the one that
//!    became free last, else the one free first. A message that waits for its link (a header
//!    line behind its payload) then takes a port only from when it goes, and the node's other
//!    ports stay free for its messages to other neighbours (seed 002's several directions at
//!    once).
//! 4. It arrives at `s + setup + latency + (hops - 1) hop_ns + n / B`: `setup + latency` is
//!    the mode's one-way latency over one hop, measured by the seeds' 8-byte ping-pongs.
//!
//! A ring packet whose payload does not ride in its header line is one message of payload and
//! header chained (PEACH2's chained descriptors; one RDMA put with its notice on Tofu): one
//! issue, plus `dma.descriptor_ns` for the second descriptor.
//!
//! The model is deliberately at the level of the seeds' own reasoning (Hockney per link plus
//! contention): no packets, no credits inside the network, no adaptive routing.

use serde::Deserialize;

use crate::error::{Error, ErrorKind, Result};

/// The most nodes a model may have (one rank each; a simulated job's ranks are coroutines of
/// one thread).
pub const MAX_NODES: u32 = 1 << 16;

/// Virtual time in picoseconds.
pub(crate) type Ps = u64;

/// Nanoseconds (a model parameter) in picoseconds.
pub(crate) fn ps(ns: f64) -> Ps {
    // Parameters are checked to be finite and non-negative; a float-to-integer cast saturates
    // (an unbounded timeout becomes the end of virtual time, and adds to it saturate too).
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let p = (ns * 1000.0).round() as u64;
    p
}

/// Picoseconds of virtual time in microseconds.
pub(crate) fn us(t: Ps) -> f64 {
    t as f64 * 1e-6
}

/// The models that ship with tca, by name: (name, TOML text).
pub const BUILT_IN: &[(&str, &str)] = &[
    (
        "peach2-2x8",
        include_str!("../../../networks/peach2-2x8.toml"),
    ),
    (
        "peach2-2x8-gpu",
        include_str!("../../../networks/peach2-2x8-gpu.toml"),
    ),
    ("tofu-384", include_str!("../../../networks/tofu-384.toml")),
    (
        "tofu-64x6",
        include_str!("../../../networks/tofu-64x6.toml"),
    ),
    (
        "tofu-8x6x8",
        include_str!("../../../networks/tofu-8x6x8.toml"),
    ),
    ("fat-tree", include_str!("../../../networks/fat-tree.toml")),
];

/// A network model: topology, bandwidths, latencies, software and compute costs.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Network {
    /// The model's name (printed with every simulated result).
    pub name: String,
    /// One line on what it models.
    pub summary: String,
    /// How nodes are connected.
    pub topology: Topology,
    /// Links and node ports.
    pub link: Link,
    /// What the sending CPU spends per operation.
    pub software: Software,
    /// Programmed I/O: CPU stores into remote memory, for small messages (absent: none).
    #[serde(default)]
    pub pio: Option<Pio>,
    /// The DMA engine: every message PIO does not carry.
    pub dma: Dma,
    /// Rates that price the computation inside collectives.
    pub compute: ComputeRates,
}

/// How nodes are connected.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Topology {
    /// A torus: `dims[0]` varies fastest along node numbers; routes go dimension by
    /// dimension, the shorter way round (the `+` way on a tie).
    Torus {
        /// Nodes along each dimension.
        dims: Vec<u32>,
    },
    /// A two-level fat tree: `nodes_per_leaf` nodes on each leaf switch, every leaf linked
    /// to every one of `spines` spine switches; a route between leaves goes up to spine
    /// `destination % spines` (d-mod-k, deterministic).
    FatTree {
        /// Nodes.
        nodes: u32,
        /// Nodes per leaf switch.
        nodes_per_leaf: u32,
        /// Spine switches.
        spines: u32,
    },
}

/// Links and node ports.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Link {
    /// Bandwidth of a link, per direction (GB/s = bytes per ns).
    pub gbs: f64,
    /// Latency of every hop after the first (ns).
    pub hop_ns: f64,
    /// Messages a node injects (and receives) at the same time: its network interfaces.
    pub ports_per_node: u32,
    /// Bandwidth of one node port (GB/s).
    pub port_gbs: f64,
}

/// The sender's software cost.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Software {
    /// CPU time per put, signal or atomic (ns).
    pub put_ns: f64,
    /// CPU time of one look at memory that finds nothing new (a `test` or progress call, ns).
    pub poll_ns: f64,
}

/// Programmed I/O.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pio {
    /// The largest message sent by PIO (bytes).
    pub max_bytes: u64,
    /// One-way latency over one hop (ns).
    pub latency_ns: f64,
    /// Store bandwidth (GB/s).
    pub gbs: f64,
}

/// The DMA engine.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Dma {
    /// Flight time over one hop after the message's start (ns): the one-way latency over one
    /// hop is `setup_ns + latency_ns`.
    pub latency_ns: f64,
    /// Hardware time to start each message (ns), during which it holds every resource of its
    /// route (its links and a port at each end, as its data does): the next message on them
    /// starts only after it (seed 002's L_H, "the hardware part of preparing a
    /// communication", which its pipelines pay per segment, eq. 9's max(L_S, L_H + m_B/B)).
    /// Paid before `latency_ns`; 0 by default.
    #[serde(default)]
    pub setup_ns: f64,
    /// CPU time to write and start a descriptor (ns).
    pub descriptor_ns: f64,
    /// What the engine reads from the sender's memory (GB/s): host or GPU memory.
    pub read_gbs: f64,
    /// The DMA channels' read rates (GB/s), each measured running alone, for a put split over
    /// several channels ([`crate::am`]'s channels: part i on channel i, parts beyond the
    /// list queued behind the earlier ones round-robin). Running together they read the
    /// sender's memory through one port, so together they move at most what a put does
    /// (`read_gbs`, the link and the port). Empty (the default): one channel at `read_gbs`,
    /// so a split put moves at the whole put's rate (and each further part costs its
    /// descriptor).
    #[serde(default)]
    pub channels_gbs: Vec<f64>,
}

/// Rates of the computation inside collectives.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ComputeRates {
    /// Reduction throughput (GB/s of the incoming operand).
    pub reduce_gbs: f64,
}

/// A resource a message holds: a node port or a link.
pub(crate) type Resource = u32;

/// How one message travels (see the module's pricing rules).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Route {
    /// Sender CPU time before the message is ready.
    pub(crate) issue: Ps,
    /// Hardware time from start to the first byte's leaving, holding the route's links and
    /// ports.
    pub(crate) setup: Ps,
    /// Latency from the first byte's leaving to its arrival.
    pub(crate) latency: Ps,
    /// Bytes per ns it streams at.
    pub(crate) gbs: f64,
}

impl Network {
    /// A model by name (one of [`BUILT_IN`]) or a path to a TOML file.
    pub fn load(name_or_path: &str) -> Result<Self> {
        if let Some((_, text)) = BUILT_IN.iter().find(|(n, _)| *n == name_or_path) {
            return Self::parse(text, name_or_path);
        }
        let path = std::path::Path::new(name_or_path);
        if !path.exists() {
            let names: Vec<&str> = BUILT_IN.iter().map(|(n, _)| *n).collect();
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "no network model {name_or_path:?}: name one of {} or give a TOML file",
                    names.join(", ")
                ),
            ));
        }
        let text = std::fs::read_to_string(path).map_err(|e| {
            Error::os(
                ErrorKind::InvalidArgument,
                format!("reading the network model {}", path.display()),
                e,
            )
        })?;
        Self::parse(&text, &path.display().to_string())
    }

    /// A model from TOML text (`what` names it in errors); checks every parameter.
    pub fn parse(text: &str, what: &str) -> Result<Self> {
        let n: Self = toml::from_str(text).map_err(|e| {
            Error::new(
                ErrorKind::InvalidArgument,
                format!("network model {what}: {e}"),
            )
        })?;
        n.check().map_err(|m| {
            Error::new(
                ErrorKind::InvalidArgument,
                format!("network model {what}: {m}"),
            )
        })?;
        Ok(n)
    }

    fn check(&self) -> std::result::Result<(), String> {
        let rate = |v: f64, what: &str| {
            // At least 1 KB/s: slower would make a message's time overflow virtual time.
            if v.is_finite() && (1e-6..=1e6).contains(&v) {
                Ok(())
            } else {
                Err(format!(
                    "{what} must be a rate from 1e-6 to 1e6 GB/s, not {v}"
                ))
            }
        };
        let time = |v: f64, what: &str| {
            if v.is_finite() && (0.0..1e12).contains(&v) {
                Ok(())
            } else {
                Err(format!("{what} must be a time in ns (0 or more), not {v}"))
            }
        };
        rate(self.link.gbs, "link.gbs")?;
        rate(self.link.port_gbs, "link.port_gbs")?;
        time(self.link.hop_ns, "link.hop_ns")?;
        time(self.software.put_ns, "software.put_ns")?;
        time(self.software.poll_ns, "software.poll_ns")?;
        time(self.dma.latency_ns, "dma.latency_ns")?;
        time(self.dma.setup_ns, "dma.setup_ns")?;
        time(self.dma.descriptor_ns, "dma.descriptor_ns")?;
        rate(self.dma.read_gbs, "dma.read_gbs")?;
        if self.dma.channels_gbs.len() > crate::fabric::MAX_PARTS {
            return Err(format!(
                "dma.channels_gbs lists {} channels; at most {} are modelled",
                self.dma.channels_gbs.len(),
                crate::fabric::MAX_PARTS
            ));
        }
        for g in &self.dma.channels_gbs {
            rate(*g, "every rate of dma.channels_gbs")?;
        }
        rate(self.compute.reduce_gbs, "compute.reduce_gbs")?;
        if let Some(p) = &self.pio {
            rate(p.gbs, "pio.gbs")?;
            time(p.latency_ns, "pio.latency_ns")?;
        }
        if !(1..=64).contains(&self.link.ports_per_node) {
            return Err(format!(
                "link.ports_per_node must be 1..=64, not {}",
                self.link.ports_per_node
            ));
        }
        match &self.topology {
            Topology::Torus { dims } => {
                if dims.is_empty() || dims.len() > 8 || dims.contains(&0) {
                    return Err(format!(
                        "a torus needs 1 to 8 dimensions of at least one node, not {dims:?}"
                    ));
                }
                let nodes = dims.iter().try_fold(1u32, |a, &d| a.checked_mul(d));
                if nodes.is_none_or(|n| n > MAX_NODES) {
                    return Err(format!(
                        "a torus of {dims:?} has more than {MAX_NODES} nodes"
                    ));
                }
            }
            Topology::FatTree {
                nodes,
                nodes_per_leaf,
                spines,
            } => {
                if *nodes == 0 || *nodes_per_leaf == 0 || *spines == 0 {
                    return Err("a fat tree needs nodes, nodes_per_leaf and spines above 0".into());
                }
                if *nodes > MAX_NODES || *spines > 1024 {
                    return Err(format!(
                        "a fat tree has at most {MAX_NODES} nodes and 1024 spines"
                    ));
                }
            }
        }
        Ok(())
    }

    /// Nodes of the topology (the largest job it runs: one rank per node).
    pub fn nodes(&self) -> u32 {
        match &self.topology {
            Topology::Torus { dims } => dims.iter().product(),
            Topology::FatTree { nodes, .. } => *nodes,
        }
    }

    /// The topology in words (`torus 8x2`, `fat tree of 64 nodes, 16 per leaf, 4 spines`).
    pub fn shape(&self) -> String {
        match &self.topology {
            Topology::Torus { dims } => format!(
                "torus {}",
                dims.iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join("x")
            ),
            Topology::FatTree {
                nodes,
                nodes_per_leaf,
                spines,
            } => format!("fat tree of {nodes} nodes, {nodes_per_leaf} per leaf, {spines} spines"),
        }
    }

    /// Resources of the whole network: every node's ports (injection then ejection), then
    /// the links.
    pub(crate) fn resources(&self) -> usize {
        let nodes = self.nodes() as usize;
        let ports = nodes * 2 * self.link.ports_per_node as usize;
        ports
            + match &self.topology {
                Topology::Torus { dims } => nodes * 2 * dims.len(),
                Topology::FatTree {
                    nodes_per_leaf,
                    spines,
                    ..
                } => {
                    let leaves = nodes.div_ceil(*nodes_per_leaf as usize);
                    2 * nodes + 2 * leaves * *spines as usize
                }
            }
    }

    /// The injection (`out`) or ejection ports of `node`.
    pub(crate) fn ports(&self, node: u32, out: bool) -> std::ops::Range<Resource> {
        let k = self.link.ports_per_node;
        let first = (node * 2 + u32::from(!out)) * k;
        first..first + k
    }

    /// The links from node `a` to node `b` in order (empty for `a == b`), appended to
    /// `links`; returns the switch or router hops after the first.
    pub(crate) fn links(&self, a: u32, b: u32, links: &mut Vec<Resource>) -> u32 {
        let base = self.nodes() * 2 * self.link.ports_per_node;
        match &self.topology {
            Topology::Torus { dims } => {
                let nd = u32::try_from(dims.len()).unwrap_or(u32::MAX);
                let mut cur = a;
                let mut hops = 0u32;
                let mut stride = 1u32;
                for (d, &k) in (0u32..).zip(dims.iter()) {
                    let ca = (cur / stride) % k;
                    let cb = (b / stride) % k;
                    let delta = (cb + k - ca) % k;
                    let (dir, steps) = if delta <= k / 2 {
                        (0, delta)
                    } else {
                        (1, k - delta)
                    };
                    for _ in 0..steps {
                        links.push(base + (cur * nd + d) * 2 + dir);
                        let c = (cur / stride) % k;
                        let next = if dir == 0 {
                            (c + 1) % k
                        } else {
                            (c + k - 1) % k
                        };
                        cur = cur - c * stride + next * stride;
                        hops += 1;
                    }
                    stride *= k;
                }
                hops.saturating_sub(1)
            }
            Topology::FatTree {
                nodes,
                nodes_per_leaf,
                spines,
            } => {
                if a == b {
                    return 0;
                }
                let leaves = nodes.div_ceil(*nodes_per_leaf);
                let (la, lb) = (a / nodes_per_leaf, b / nodes_per_leaf);
                // Node up-links, then node down-links, then leaf-to-spine, then
                // spine-to-leaf.
                links.push(base + a);
                if la != lb {
                    let s = b % spines;
                    links.push(base + 2 * nodes + la * spines + s);
                    links.push(base + 2 * nodes + leaves * spines + s * leaves + lb);
                }
                links.push(base + nodes + b);
                // Switches crossed: the leaf, or leaf, spine, leaf.
                if la == lb { 0 } else { 2 }
            }
        }
    }

    /// How a message of `n` bytes travels over `hops` extra hops: whether it goes by PIO,
    /// what the sender spends, its latency and rate.
    pub(crate) fn route(&self, n: usize, hops: u32) -> Route {
        let bytes = n as f64;
        let hop = self.link.hop_ns * f64::from(hops);
        let link = self.link.gbs.min(self.link.port_gbs);
        match &self.pio {
            Some(p) if n as u64 <= p.max_bytes => Route {
                issue: ps(self.software.put_ns + bytes / p.gbs),
                setup: 0,
                latency: ps(p.latency_ns + hop),
                gbs: link.min(p.gbs),
            },
            _ => Route {
                issue: ps(self.software.put_ns + self.dma.descriptor_ns),
                setup: ps(self.dma.setup_ns),
                latency: ps(self.dma.latency_ns + hop),
                gbs: link.min(self.dma.read_gbs),
            },
        }
    }

    /// A DMA put split over the channels, `parts[i]` bytes on channel `i % channels` (parts on
    /// one channel in order), all starting at once: when each part is complete, in picoseconds
    /// from the start, into `out`. Fluid sharing: every busy channel streams at its own rate
    /// ([`Dma::channels_gbs`]), all scaled down alike when together they exceed what one put
    /// moves (the memory's read rate, the link's and the port's: they share them), so a
    /// channel that finishes early leaves its share to the others.
    pub(crate) fn channel_finishes(&self, parts: &[usize], out: &mut Vec<Ps>) {
        let one = [self.dma.read_gbs];
        let channels: &[f64] = if self.dma.channels_gbs.is_empty() {
            &one
        } else {
            &self.dma.channels_gbs
        };
        let cap = self.link.gbs.min(self.link.port_gbs).min(self.dma.read_gbs);
        out.clear();
        out.resize(parts.len(), 0);
        let nch = channels.len().max(1);
        // Per channel: bytes moved so far, and the cumulative end of each of its parts in order.
        let mut moved = vec![0f64; nch];
        let mut next = vec![0usize; nch];
        let queue = |c: usize| (c..parts.len()).step_by(nch).collect::<Vec<_>>();
        let queues: Vec<Vec<usize>> = (0..nch).map(queue).collect();
        let ends: Vec<Vec<f64>> = queues
            .iter()
            .map(|q| {
                q.iter()
                    .scan(0f64, |acc, &i| {
                        *acc += parts[i] as f64;
                        Some(*acc)
                    })
                    .collect()
            })
            .collect();
        let mut t = 0f64; // ns
        loop {
            // Channels with bytes left; parts that end where the channel stands are done.
            for c in 0..nch {
                while next[c] < ends[c].len() && ends[c][next[c]] <= moved[c] {
                    out[queues[c][next[c]]] = ps(t);
                    next[c] += 1;
                }
            }
            let busy: Vec<usize> = (0..nch).filter(|&c| next[c] < ends[c].len()).collect();
            if busy.is_empty() {
                return;
            }
            let want: f64 = busy.iter().map(|&c| channels[c]).sum();
            let scale = (cap / want).min(1.0);
            // Until the first busy channel reaches the end of its current part (bytes per ns is
            // GB/s).
            let dt = busy
                .iter()
                .map(|&c| (ends[c][next[c]] - moved[c]) / (channels[c] * scale))
                .fold(f64::INFINITY, f64::min);
            for &c in &busy {
                let r = channels[c] * scale;
                moved[c] = (moved[c] + r * dt).min(ends[c][next[c]]);
            }
            // The channel that set `dt` lands exactly on its end (no rounding left behind).
            if let Some(&c) = busy.iter().min_by(|&&a, &&b| {
                let ta = (ends[a][next[a]] - moved[a]).abs();
                let tb = (ends[b][next[b]] - moved[b]).abs();
                ta.total_cmp(&tb)
            }) {
                moved[c] = ends[c][next[c]];
            }
            t += dt;
        }
    }

    /// The sender's cost of one more descriptor in a chain, for a message of `n` bytes: the
    /// DMA engine's descriptor cost, or nothing where PIO stores carry it.
    pub(crate) fn chained_descriptor(&self, n: usize) -> Ps {
        match &self.pio {
            Some(p) if n as u64 <= p.max_bytes => 0,
            _ => ps(self.dma.descriptor_ns),
        }
    }

    /// The collectives' cost model of this network, from its parameters alone (so that Auto
    /// chooses the same on every host: a calibration file of the machine running the
    /// simulation describes that machine, not the network): per chunk, the sender's issue of
    /// a one-line packet and the receiver's look at it; a synchronising round, the one-hop
    /// latency of such a packet; a chunk that needs the DMA engine, its extra issue cost and
    /// latency; per byte, the DMA stream's rate (link, port, the engine's reads) each way;
    /// reductions at the model's reduce rate. Local copies cost nothing (the simulation does
    /// not charge them under `--compute model`), and contention on shared links, which the
    /// simulation prices, is what the cost model leaves out.
    pub fn cost_model(&self) -> crate::coll::model::CostModel {
        let line = self.route(crate::fabric::ring::INLINE, 0);
        let dma = self.route(usize::MAX, 0);
        let small = us(line.issue);
        // A chunk past its header line is its payload and header chained: one issue and two
        // descriptors. A message's setup is in the one-way latency only: that it also holds
        // the link, so that a stream of chunks pays it per chunk, is left to the simulation
        // (as contention is).
        let chained = dma.issue + self.chained_descriptor(usize::MAX);
        let spill =
            us(chained + dma.setup + dma.latency) - us(line.issue + line.setup + line.latency);
        let per_byte = 1e-3 / dma.gbs;
        crate::coll::model::CostModel {
            delta: us(line.setup + line.latency),
            alpha: small + self.software.poll_ns * 1e-3,
            alpha_spill: spill.max(0.0),
            beta: per_byte,
            beta_send: per_byte,
            beta_small: 0.0,
            beta_local: 0.0,
            gamma: 1e-3 / self.compute.reduce_gbs,
            beta_far: 0.0,
            knee: 0.0,
            cache: crate::coll::model::MAX_CACHE,
            cores: 0.0,
        }
    }

    /// Time to reduce `bytes` of incoming operand.
    pub(crate) fn reduce_time(&self, bytes: u64) -> Ps {
        ps(bytes as f64 / self.compute.reduce_gbs)
    }
}

/// The fuzz target `network`: a model file's text (`tca sim --network FILE`), parsed; an
/// accepted model is then used the way a simulation uses it — routes between its first,
/// middle and last nodes, messages of 0 B to 1 GiB, a put split over its DMA channels,
/// reductions and its cost model — none of which may panic, and every link named must be one
/// of the network's resources. Returns whether the model was accepted.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub fn fuzz_network(text: &str) -> bool {
    let Ok(n) = Network::parse(text, "fuzz") else {
        return false;
    };
    let nodes = n.nodes();
    assert!((1..=MAX_NODES).contains(&nodes), "{nodes} nodes");
    let _ = n.shape();
    let resources = n.resources();
    let mut links = Vec::new();
    for (a, b) in [(0, nodes - 1), (nodes - 1, 0), (nodes / 2, 0), (0, 0)] {
        links.clear();
        let hops = n.links(a, b, &mut links);
        assert!(links.iter().all(|&l| (l as usize) < resources), "{links:?}");
        assert!(hops as usize <= links.len(), "{hops} hops over {links:?}");
        for out in [true, false] {
            assert!(n.ports(a, out).all(|p| (p as usize) < resources));
        }
        for bytes in [0, 8, 4096, 1 << 20, 1 << 30] {
            let r = n.route(bytes, hops);
            assert!(r.gbs.is_finite() && r.gbs > 0.0, "{}", r.gbs);
            let _ = (n.chained_descriptor(bytes), hold(bytes, r.gbs));
        }
    }
    let mut out = Vec::new();
    for parts in [&[1 << 20][..], &[0, 4096, 64, 1 << 16], &[3, 5, 7, 11, 13]] {
        n.channel_finishes(parts, &mut out);
        assert_eq!(out.len(), parts.len());
    }
    let _ = n.reduce_time(1 << 30);
    assert!(
        n.cost_model().validate().is_ok(),
        "an accepted model's cost model"
    );
    true
}

/// Picoseconds that `n` bytes hold a resource at `gbs` bytes per ns.
pub(crate) fn hold(n: usize, gbs: f64) -> Ps {
    ps(n as f64 / gbs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_built_in_model_loads() {
        for (name, _) in BUILT_IN {
            let n = Network::load(name).unwrap();
            assert_eq!(&n.name, name);
            assert!(n.nodes() >= 16, "{name}");
        }
        assert_eq!(Network::load("tofu-8x6x8").unwrap().nodes(), 384);
        assert_eq!(Network::load("tofu-64x6").unwrap().nodes(), 384);
        assert_eq!(Network::load("tofu-384").unwrap().nodes(), 384);
        let e = Network::load("no-such-net").unwrap_err();
        assert!(e.message().contains("peach2-2x8"), "{e}");
    }

    #[test]
    fn bad_models_are_refused_with_the_field() {
        let good = BUILT_IN[0].1;
        let bad = good.replace("gbs = 4.0", "gbs = -4.0");
        assert_ne!(bad, good, "the test edits a real line");
        let e = Network::parse(&bad, "x").unwrap_err();
        assert!(e.message().contains("link.gbs"), "{e}");
        let e = Network::parse("name = 1", "x").unwrap_err();
        assert!(e.message().contains("network model x"), "{e}");
    }

    fn torus(dims: &[u32]) -> Network {
        let mut n = Network::load("peach2-2x8").unwrap();
        n.topology = Topology::Torus {
            dims: dims.to_vec(),
        };
        n
    }

    #[test]
    fn torus_routes_are_minimal_and_dimension_ordered() {
        let n = torus(&[8, 2]);
        let mut l = Vec::new();
        // Neighbours: one link, no extra hop.
        assert_eq!(n.links(0, 1, &mut l), 0);
        assert_eq!(l.len(), 1);
        // The short way round: 0 -> 7 is one hop backwards.
        l.clear();
        assert_eq!(n.links(0, 7, &mut l), 0);
        assert_eq!(l.len(), 1);
        // 4 away in x, then 1 in y.
        l.clear();
        assert_eq!(n.links(0, 12, &mut l), 4);
        assert_eq!(l.len(), 5);
        // Distinct links along a route; the reverse route shares none of them.
        let mut back = Vec::new();
        n.links(12, 0, &mut back);
        assert!(l.iter().all(|x| !back.contains(x)));
        let mut s = l.clone();
        s.sort_unstable();
        s.dedup();
        assert_eq!(s.len(), l.len());
        // Every link index is inside the resource table.
        let max = u32::try_from(n.resources()).unwrap();
        for a in 0..16 {
            for b in 0..16 {
                let mut r = Vec::new();
                n.links(a, b, &mut r);
                let dist = |x: u32, y: u32, k: u32| {
                    let d = (y + k - x) % k;
                    d.min(k - d)
                };
                let want = dist(a % 8, b % 8, 8) + dist(a / 8, b / 8, 2);
                assert_eq!(u32::try_from(r.len()).unwrap(), want, "{a} -> {b}");
                assert!(r.iter().all(|&x| x < max));
            }
        }
    }

    #[test]
    fn fat_tree_routes_go_up_only_between_leaves() {
        let n = Network::load("fat-tree").unwrap();
        let Topology::FatTree { nodes_per_leaf, .. } = n.topology else {
            panic!("fat-tree is a fat tree");
        };
        let mut l = Vec::new();
        assert_eq!(n.links(0, 1, &mut l), 0);
        assert_eq!(l.len(), 2);
        l.clear();
        assert_eq!(n.links(0, nodes_per_leaf, &mut l), 2);
        assert_eq!(l.len(), 4);
        let max = u32::try_from(n.resources()).unwrap();
        assert!(l.iter().all(|&x| x < max));
    }

    #[test]
    fn the_collectives_cost_model_comes_from_the_parameters() {
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b.abs().max(1.0);
        // PEACH2: one-line packets by PIO, the rest by DMA at the engine's read rate.
        let n = Network::load("peach2-2x8").unwrap();
        let p = n.pio.clone().unwrap();
        let m = n.cost_model();
        assert!(close(m.delta, p.latency_ns * 1e-3));
        let pio_issue = n.software.put_ns + 40.0 / p.gbs;
        assert!(close(m.alpha, (pio_issue + n.software.poll_ns) * 1e-3));
        // A chunk past its header line: payload and header chained, one issue and a second
        // descriptor.
        let dma_issue = n.software.put_ns + 2.0 * n.dma.descriptor_ns;
        let spill = dma_issue + n.dma.latency_ns - pio_issue - p.latency_ns;
        assert!(close(m.alpha_spill, spill * 1e-3), "{}", m.alpha_spill);
        let rate = n.link.gbs.min(n.link.port_gbs).min(n.dma.read_gbs);
        assert!(close(m.beta, 1e-3 / rate) && close(m.beta_send, m.beta));
        assert!(close(m.gamma, 1e-3 / n.compute.reduce_gbs));
        // Without PIO every packet is a DMA one: a spilled chunk costs only its second
        // descriptor more (none on Tofu).
        let t = Network::load("tofu-8x6x8").unwrap();
        assert!(t.pio.is_none());
        assert!(close(
            t.cost_model().alpha_spill,
            t.dma.descriptor_ns * 1e-3
        ));
        assert!(t.dma.setup_ns > 0.0);
        let one_way = t.dma.setup_ns + t.dma.latency_ns;
        assert!(close(t.cost_model().delta, one_way * 1e-3));
    }

    #[test]
    fn dma_channels_share_the_port_as_a_fluid() {
        let mut n = Network::load("peach2-2x8-gpu").unwrap();
        assert_eq!(n.dma.channels_gbs, [2.9, 1.3, 0.7, 0.7]);
        // Together at most what one put moves: the GPU's read rate, under the 4 GB/s link.
        let cap = 2.8;
        assert_eq!(n.dma.read_gbs, cap);
        let mut f = Vec::new();
        // One channel alone streams at its own rate (channel 0 capped by the port).
        for (c, g) in [2.9f64, 1.3, 0.7, 0.7].into_iter().enumerate() {
            let mut parts = [0usize; 4];
            parts[c] = 1 << 20;
            n.channel_finishes(&parts, &mut f);
            assert_eq!(f[c], ps((1 << 20) as f64 / g.min(cap)), "channel {c}");
            assert!(f.iter().enumerate().all(|(i, &t)| i == c || t == 0));
        }
        // All four at their rates ask 5.6 GB/s: scaled alike, they end together at the cap.
        let total = 5_600_000usize;
        let parts = [2_900_000, 1_300_000, 700_000, 700_000];
        n.channel_finishes(&parts, &mut f);
        let end = total as f64 / cap;
        assert!(f.iter().all(|&t| t.abs_diff(ps(end)) <= 2), "{f:?}");
        // Two equal halves on channels 0 and 1 (4.2 GB/s asked): channel 0 ends first, then
        // channel 1 goes on alone at its own 1.3 GB/s.
        let h = 1_000_000usize;
        n.channel_finishes(&[h, h], &mut f);
        let s = cap / 4.2;
        let t0 = h as f64 / (2.9 * s);
        let left = h as f64 - 1.3 * s * t0;
        assert!(f[0].abs_diff(ps(t0)) <= 2, "{f:?}");
        assert!(f[1].abs_diff(ps(t0 + left / 1.3)) <= 2, "{f:?}");
        // More parts than channels queue round-robin: parts 0 and 4 on channel 0, in order.
        n.channel_finishes(&[h, 0, 0, 0, h], &mut f);
        assert_eq!(f[4], ps(2.0 * h as f64 / cap));
        assert!(f[0] < f[4]);
        // No channels listed: one at the read rate, so splitting gains nothing.
        n.dma.channels_gbs.clear();
        n.channel_finishes(&[h, h, h], &mut f);
        assert_eq!(f[2], ps(3.0 * h as f64 / cap));
        // Bad lists are refused when a model is loaded.
        n.dma.channels_gbs = vec![1.0; 9];
        assert!(n.check().unwrap_err().contains("at most 8"));
        n.dma.channels_gbs = vec![1.0, 0.0];
        assert!(n.check().unwrap_err().contains("channels_gbs"));
    }

    #[test]
    fn small_messages_go_by_pio_and_large_by_dma() {
        let n = Network::load("peach2-2x8").unwrap();
        let p = n.pio.clone().unwrap();
        let small = n.route(8, 0);
        let big = n.route(usize::try_from(p.max_bytes).unwrap() + 1, 0);
        assert_eq!(small.latency, ps(p.latency_ns));
        assert_eq!(big.latency, ps(n.dma.latency_ns));
        assert_eq!(
            n.route(8, 3).latency,
            ps(p.latency_ns + 3.0 * n.link.hop_ns)
        );
    }
}
