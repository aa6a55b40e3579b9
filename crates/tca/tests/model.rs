//! Cost models, their calibration file and model-driven selection (issue 5, item 4).

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::PathBuf;

use tca::coll::model::{
    self, Calibration, CostModel, FORMAT, Fitted, MAX_CACHE, Quality, RankModels, Source, Table,
    VERSION,
};
use tca::coll::{ALGORITHMS, Algorithm};
use tca::{Collective, Comm, threads};

/// A temporary directory removed when dropped (no dependency for one).
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let d = std::env::temp_dir().join(format!(
            "tca-model-test-{tag}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        TempDir(d)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Every parameter zero except the one at `i` in [`CostModel::PARAMS`] order (with a cache step at
/// 64 KiB, so that `beta_far` alone prices something).
fn only(i: usize, knee: f64) -> CostModel {
    let mut p = [0.0; CostModel::PARAMS.len()];
    p[i] = 1.0;
    CostModel::from_params(&p, knee, 65536.0).unwrap()
}

/// The index of parameter `name` in [`CostModel::PARAMS`].
fn param(name: &str) -> usize {
    CostModel::PARAMS.iter().position(|&p| p == name).unwrap()
}

/// A model with the named parameters set and the others zero, no knee, no cache step.
fn with(params: &[(&str, f64)]) -> CostModel {
    let mut p = [0.0; CostModel::PARAMS.len()];
    for &(name, v) in params {
        p[param(name)] = v;
    }
    CostModel::from_params(&p, 0.0, MAX_CACHE).unwrap()
}

/// A calibration that uses `m` for every collective at every rank count, every rank with a
/// core of its own (cores unknown: 0).
fn uniform(m: CostModel) -> Calibration {
    Calibration {
        ranks: vec![RankModels {
            ranks: 2,
            cores: 0,
            network: false,
            all: Fitted {
                model: m,
                fit: None,
            },
            collectives: BTreeMap::new(),
        }],
        ..Calibration::new("test", "2026-01-01T00:00:00Z", "test")
    }
}

fn sample() -> Calibration {
    let mut c = uniform(CostModel::default());
    c.ranks[0].all.fit = Some(Quality {
        points: 460,
        rms_rel_err: 0.1,
        worst_rel_err: -0.25,
        worst_at: "ring at 4096 B".into(),
    });
    c.ranks[0].collectives.insert(
        "allreduce".into(),
        Fitted {
            model: CostModel {
                delta: 0.2,
                ..CostModel::default()
            },
            fit: None,
        },
    );
    c.ranks.push(RankModels {
        ranks: 8,
        cores: 2,
        network: false,
        all: Fitted {
            model: CostModel {
                delta: 3.0,
                alpha: 0.5,
                ..CostModel::default()
            },
            fit: None,
        },
        collectives: BTreeMap::new(),
    });
    c
}

#[test]
fn calibration_file_round_trips() {
    let dir = TempDir::new("roundtrip");
    let path = dir.0.join("sub").join("model.json");
    let c = sample();
    c.save(&path).unwrap();
    let back = Calibration::load(&path).unwrap();
    assert_eq!(back, c);
    assert_eq!(Calibration::from_json(&c.to_json()).unwrap(), c);
    // What the file records.
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(v["format"], FORMAT);
    assert_eq!(v["version"], VERSION);
    assert_eq!(v["ranks"][0]["ranks"], 2);
    assert!(v["ranks"][0]["all"]["model"]["delta"].is_number(), "{v}");
    assert!(v["machine"].is_string() && v["date"].is_string());
    // Through the loader the library uses.
    let a = model::load_or_default(Some(&path));
    assert_eq!(a.source, Source::File(path.clone()));
    assert_eq!(a.calibration, c);
}

#[test]
fn files_written_before_the_spill_and_cache_terms_still_load() {
    // A version-1 file from before `alpha_spill`, `beta_far` and `cache`: those read as zero,
    // zero and no step, which is the model that file was fitted with.
    let mut v: serde_json::Value = serde_json::from_str(&sample().to_json()).unwrap();
    for key in ["alpha_spill", "beta_far", "cache"] {
        v["ranks"][0]["all"]["model"]
            .as_object_mut()
            .unwrap()
            .remove(key);
    }
    let c = Calibration::from_json(&v.to_string()).unwrap();
    let m = c.ranks[0].all.model;
    assert_eq!((m.alpha_spill, m.beta_far, m.cache), (0.0, 0.0, MAX_CACHE));
    assert_eq!(m.alpha, CostModel::default().alpha);
}

#[test]
fn more_ranks_than_cores_share_the_cores() {
    // Chunks only: a broadcast's p - 1 sends and p - 1 receives, spread over the cores,
    // against its busiest rank's; an exchange's every rank, p / cores times one rank's.
    let mut c = uniform(only(param("alpha"), 0.0));
    let bcast =
        |c: &Calibration, name: &str, p: usize| c.predict(alg(Collective::Broadcast, name), p, 8);
    let allreduce = |c: &Calibration, p: usize| {
        c.predict(alg(Collective::Allreduce, "recursive_doubling"), p, 8)
    };
    // One core each (cores unknown): the busiest rank.
    assert_eq!(bcast(&c, "pipeline", 8), 2.0);
    assert_eq!(bcast(&c, "binomial", 8), 3.0);
    assert_eq!(bcast(&c, "flat", 8), 7.0);
    assert_eq!(allreduce(&c, 8), 6.0);
    // 2 cores for 8 ranks: 14 chunks over 2 cores for every one-way broadcast.
    c.ranks[0].cores = 2;
    for name in ["pipeline", "binomial", "flat"] {
        assert_eq!(bcast(&c, name, 8), 7.0, "{name}");
    }
    assert_eq!(allreduce(&c, 8), 24.0);
    // As many cores as ranks: nothing changes.
    assert_eq!(bcast(&c, "pipeline", 2), 1.0);
    assert_eq!(allreduce(&c, 2), 2.0);
    // Choices stay the argmin of the predictions.
    check_argmin(&c);
}

#[test]
fn models_are_chosen_by_rank_count_and_collective() {
    let c = sample();
    // Nearest rank count by ratio: 2 for 2 and 3, 8 for 5 and more.
    assert_eq!(c.nearest(2).unwrap().ranks, 2);
    assert_eq!(c.nearest(3).unwrap().ranks, 2);
    assert_eq!(c.nearest(5).unwrap().ranks, 8);
    assert_eq!(c.nearest(100).unwrap().ranks, 8);
    assert_eq!(c.nearest(1).unwrap().ranks, 2);
    // A collective with its own model uses it; the others use the fit over all.
    assert_eq!(c.model(Collective::Allreduce, 2).delta, 0.2);
    assert_eq!(c.model(Collective::Broadcast, 2), CostModel::default());
    assert_eq!(c.model(Collective::Allreduce, 8).delta, 3.0);
    // The cores come from the rank count's entry.
    assert_eq!(c.model(Collective::Allreduce, 8).cores, 2.0);
    assert_eq!(c.model(Collective::Allreduce, 2).cores, 0.0);
}

#[test]
fn models_measured_across_a_network_serve_communicators_that_span_one() {
    let mut c = sample();
    let net = CostModel {
        delta: 12.0,
        alpha: 9.0,
        ..CostModel::default()
    };
    c.ranks.push(RankModels {
        ranks: 4,
        cores: 2,
        network: true,
        all: Fitted {
            model: net,
            fit: None,
        },
        collectives: BTreeMap::new(),
    });
    // Within a node the network's entry is never taken, even at its rank count.
    assert_eq!(c.nearest(4).unwrap().ranks, 2);
    assert_eq!(c.model(Collective::Allreduce, 4).delta, 0.2);
    // Across a network only it is, at every rank count.
    for p in [2, 4, 64] {
        assert_eq!(c.nearest_on(p, true).unwrap().ranks, 4);
        assert_eq!(c.model_on(Collective::Broadcast, p, true).delta, 12.0);
    }
    // Without a network entry: the built-in network model, not the shared-memory one.
    let shm_only = sample();
    assert!(shm_only.nearest_on(2, true).is_none());
    assert_eq!(
        shm_only.model_on(Collective::Allreduce, 2, true),
        CostModel::network()
    );
    // The field survives the file, and a file without it reads as measured within a node.
    let back = Calibration::from_json(&c.to_json()).unwrap();
    assert_eq!(back, c);
    assert!(!c.to_json().contains("\"network\": false"));
    // Each table is the argmin of its own models.
    for p in [2usize, 4, 8] {
        let table = Table::new(&c, p, true);
        for coll in Collective::ALL {
            for bytes in [8usize, 65536, 4 << 20] {
                let chosen = c.choose_on(coll, p, bytes, true);
                assert!(std::ptr::eq(table.get(coll, bytes), chosen));
                let m = c.model_on(coll, p, true);
                let t = chosen.cost(&m, p, bytes);
                for a in coll
                    .algorithms()
                    .filter(|a| a.auto && (a.supports)(p) && bytes <= a.auto_max)
                {
                    assert!(t <= a.cost(&m, p, bytes) * (1.0 + 1e-9), "{}", a.name);
                }
            }
        }
    }
}

/// Over a grid of rank counts and sizes, `choose` returns an algorithm whose predicted time no
/// supported algorithm that Auto considers beats, and the communicator's table agrees with it.
fn check_argmin(c: &Calibration) {
    for p in [2usize, 3, 4, 5, 8, 16, 64] {
        let table = Table::new(c, p, false);
        for k in 0..=24 {
            let bytes = if k == 0 { 0 } else { 1usize << (k - 1) };
            for coll in Collective::ALL {
                let chosen = c.choose(coll, p, bytes);
                assert!((chosen.supports)(p), "{} on {p}", chosen.name);
                assert!(chosen.auto, "{} is only run when forced", chosen.name);
                let t = c.predict(chosen, p, bytes);
                for a in coll
                    .algorithms()
                    .filter(|a| a.auto && (a.supports)(p) && bytes <= a.auto_max)
                {
                    assert!(
                        t <= c.predict(a, p, bytes) * (1.0 + 1e-9),
                        "{} {bytes} B on {p}: chose {} ({t}) over {} ({})",
                        coll.name(),
                        chosen.name,
                        a.name,
                        c.predict(a, p, bytes)
                    );
                }
                assert!(
                    std::ptr::eq(table.get(coll, bytes), chosen),
                    "table, {bytes} B"
                );
            }
        }
    }
}

#[test]
fn selection_picks_the_lowest_predicted_time() {
    check_argmin(&Calibration::builtin());
    check_argmin(&sample());
    for i in 0..CostModel::PARAMS.len() {
        check_argmin(&uniform(only(i, 0.0)));
        check_argmin(&uniform(only(i, 4096.0)));
    }
}

/// One model per parameter alone, with and without a knee, and the defaults.
fn models_for_dominance() -> Vec<Calibration> {
    (0..CostModel::PARAMS.len())
        .flat_map(|i| [uniform(only(i, 0.0)), uniform(only(i, 4096.0))])
        // beta_small without a knee prices nothing: every algorithm would tie.
        .filter(|c| {
            let m = c.ranks[0].all.model;
            !(m.beta_small > 0.0 && m.knee == 0.0)
        })
        .chain([Calibration::builtin()])
        .collect()
}

fn name(c: &Calibration, coll: Collective, p: usize, bytes: usize) -> &'static str {
    c.choose(coll, p, bytes).name
}

#[test]
fn each_algorithm_wins_where_its_model_says_it_should() {
    let delta = uniform(only(param("delta"), 0.0)); // rounds only
    let alpha = uniform(only(param("alpha"), 0.0)); // chunks only
    let beta = uniform(only(param("beta"), 0.0)); // received bytes only
    let send = uniform(only(param("beta_send"), 0.0)); // sent bytes only

    // Allreduce. Only rounds cost: one round beats all (flat); with chunks and bytes
    // priced too, the others take their turns.
    assert_eq!(name(&delta, Collective::Allreduce, 8, 8), "flat");
    // Chunks, and received bytes a little: recursive doubling's log2 p messages of n beat
    // dissemination's log2 p messages of 1, 2, 4 ... blocks (the same chunk count at 64 B:
    // with chunks alone the two tie).
    let chunks_then_bytes = uniform(with(&[("alpha", 1.0), ("beta", 0.001)]));
    assert_eq!(
        name(&chunks_then_bytes, Collective::Allreduce, 8, 64),
        "recursive_doubling"
    );
    assert_eq!(
        name(&beta, Collective::Allreduce, 8, 1 << 22),
        "rabenseifner"
    );
    // Non-power of two: rabenseifner's fold sends the whole buffer, the ring does not.
    assert_eq!(name(&beta, Collective::Allreduce, 6, 1 << 22), "ring");
    // Dissemination receives and combines the same bytes as flat in ceil(log2 p) rounds of
    // one message each, flat in one round of p - 1 messages: with rounds and messages both
    // priced, flat predicts less at 3 ranks (2 rounds against 2 messages' worth), and
    // dissemination from 16 ranks on (4 or 6 messages against 15 or 63).
    let rounds_and_chunks = uniform(with(&[("delta", 1.0), ("alpha", 0.3)]));
    for (p, flat_wins) in [(3usize, true), (16, false), (64, false)] {
        let m = &rounds_and_chunks;
        let (d, f) = (
            m.predict(alg(Collective::Allreduce, "dissemination"), p, 8),
            m.predict(alg(Collective::Allreduce, "flat"), p, 8),
        );
        assert_eq!(d > f, flat_wins, "{p}: dissemination {d}, flat {f}");
    }

    // Broadcast: flat when sending is much cheaper than receiving (the receivers set the pace
    // and nobody forwards); a pipeline when sending is what costs (each rank sends once).
    let cheap_send = uniform(with(&[("beta", 1.0), ("beta_send", 0.1)]));
    assert_eq!(name(&cheap_send, Collective::Broadcast, 4, 1 << 20), "flat");
    assert_eq!(name(&send, Collective::Broadcast, 8, 1 << 20), "pipeline");
    assert_eq!(name(&alpha, Collective::Broadcast, 8, 8), "pipeline");
    // Scatter + allgather moves about 2 n per rank, as a pipeline's middle rank does, plus
    // p - 1 exchange rounds and the root's p - 1 scatter sends: its advantage, fewer hops for
    // one call on many ranks, does not show in back-to-back calls, which is what the models
    // predict. So without a knee, flat, binomial or the pipeline always predict less. (With
    // one, its n/p-byte messages get more bytes at the small-copy price: see below.)
    for c in [&cheap_send, &send, &beta, &alpha, &delta] {
        for p in [4usize, 16, 64] {
            assert_ne!(
                name(c, Collective::Broadcast, p, 1 << 22),
                "scatter_allgather"
            );
        }
    }
    let bin = with(&[("alpha", 1.0), ("beta_send", 1.0)]);
    assert_eq!(name(&uniform(bin), Collective::Broadcast, 4, 8), "pipeline");

    // Allgather: the same bytes for all four, so the rounds decide: flat's one round wins
    // for blocks up to its `AUTO_MAX` of 1 KiB (at 2 ranks every algorithm is one round, and
    // the first in the table, recursive doubling, wins the tie), and among the others log p
    // beats p - 1, recursive doubling winning the tie with Bruck on powers of two. Past 1 KiB
    // Auto does not consider flat (`Algorithm::auto_max`), so the log-step ones take over.
    for p in [6usize, 8] {
        assert_eq!(name(&delta, Collective::Allgather, p, 1024), "flat", "{p}");
    }
    assert_eq!(
        name(&delta, Collective::Allgather, 2, 1024),
        "recursive_doubling"
    );
    for n in [2048, 1 << 20] {
        assert_eq!(
            name(&delta, Collective::Allgather, 8, n),
            "recursive_doubling"
        );
    }
    assert_eq!(name(&delta, Collective::Allgather, 6, 1 << 20), "bruck");
    let ag = |a: &str, p: usize| delta.predict(alg(Collective::Allgather, a), p, 1024);
    assert_eq!(ag("recursive_doubling", 8), ag("bruck", 8));
    assert!(ag("bruck", 8) < ag("ring", 8));
    assert!(ag("bruck", 6) < ag("ring", 6));
    // Every allgather here sends each of the p - 1 blocks it passes on as a message of its
    // own, so pricing messages too does not change that (unlike the allreduce's flat against
    // dissemination, above).
    for p in [3usize, 16, 64] {
        assert_eq!(
            name(&rounds_and_chunks, Collective::Allgather, p, 8),
            "flat"
        );
    }

    // Alltoall and reduce_scatter: one round (flat) against p - 1 (pairwise, ring).
    assert_eq!(name(&delta, Collective::Alltoall, 8, 64), "flat");
    assert_eq!(name(&delta, Collective::ReduceScatter, 8, 64), "flat");

    // Scatter and gather: linear's root sends p - 1 messages, binomial's log p.
    assert_eq!(name(&alpha, Collective::Scatter, 16, 8), "binomial");
    assert_eq!(name(&beta, Collective::Scatter, 16, 1 << 20), "linear");
    // Gather: the same bytes into the root; binomial in fewer messages, linear with less
    // staging.
    assert_eq!(name(&alpha, Collective::Gather, 16, 8), "binomial");
    let local = uniform(only(param("beta_local"), 0.0));
    assert_eq!(name(&local, Collective::Gather, 16, 1 << 20), "linear");

    // Reduce: flat's root receives p - 1 buffers, binomial's log p, the ring's p - 1 blocks.
    assert_eq!(name(&alpha, Collective::Reduce, 16, 8), "binomial");
    assert_eq!(
        name(&beta, Collective::Reduce, 16, 1 << 22),
        "reduce_scatter_gather"
    );
    // Flat: the root combines p - 1 buffers where binomial's combines ceil(log2 p), but no
    // other rank forwards anything; binomial's first child receives and sends. When sends are
    // what costs, flat wins on 4 ranks.
    assert_eq!(name(&uniform(bin), Collective::Reduce, 4, 8), "flat");

    // Every registered algorithm is chosen somewhere among these models, rank counts and
    // sizes, except those Auto never considers (`Algorithm::auto`: seed 002's torus
    // algorithms) and three: the ring allgather, the ring reduce_scatter and the pairwise
    // alltoall send exactly the messages of Bruck's allgather (or the flat one-round
    // variants) in more rounds, so no parameters make them predict less (at 2 ranks they are
    // the same schedule, and the tie goes to the first in the table). The models leave out
    // what they save: fewer streams at once (incast, the cache footprint of p - 1 peers'
    // slots). They remain for forcing. If a model change makes one of them win, or another
    // never win, this list and the docs need a look.
    let dominated = [
        (Collective::Allgather, "ring"),
        (Collective::ReduceScatter, "ring"),
        (Collective::Alltoall, "pairwise"),
    ];
    let models: Vec<Calibration> = models_for_dominance()
        .into_iter()
        .chain([uniform(bin), rounds_and_chunks, cheap_send])
        .collect();
    for a in ALGORITHMS
        .iter()
        .filter(|a| a.collective != Collective::Barrier)
    {
        let wins = models.iter().any(|c| {
            [2usize, 3, 4, 6, 8, 16, 64]
                .iter()
                .any(|&p| (0..24).any(|k| std::ptr::eq(c.choose(a.collective, p, 1 << k), a)))
        });
        // Algorithms that run only when forced (`Algorithm::auto` false) never win.
        let expected = a.auto && !dominated.contains(&(a.collective, a.name));
        assert_eq!(wins, expected, "{} {}", a.collective.name(), a.name);
    }
}

#[test]
fn the_builtin_defaults_choose_sanely() {
    let c = Calibration::builtin();
    for p in [2usize, 4, 8] {
        // Small allreduces: one or two exchange rounds, never the ring's 2 (p - 1).
        let small = name(&c, Collective::Allreduce, p, 8);
        assert!(
            ["flat", "recursive_doubling", "dissemination"].contains(&small),
            "{p}: {small}"
        );
        // Large ones: a bandwidth-optimal algorithm.
        let large = name(&c, Collective::Allreduce, p, 4 << 20);
        assert!(["ring", "rabenseifner"].contains(&large), "{p}: {large}");
        // Alltoall: one round for a few bytes.
        assert_eq!(name(&c, Collective::Alltoall, p, 8), "flat");
    }
}

fn alg(coll: Collective, n: &str) -> &'static Algorithm {
    coll.algorithms().find(|a| a.name == n).unwrap()
}

#[test]
fn predictions_grow_with_size_and_are_positive() {
    let c = Calibration::builtin();
    for a in ALGORITHMS {
        for p in [2usize, 3, 8].into_iter().filter(|&p| (a.supports)(p)) {
            let mut last = 0.0;
            for k in 0..24 {
                let t = c.predict(a, p, 1 << k);
                assert!(
                    t.is_finite() && t > 0.0,
                    "{} {}",
                    a.collective.name(),
                    a.name
                );
                assert!(
                    t >= last * 0.999,
                    "{} {} at {p}: {t} < {last}",
                    a.collective.name(),
                    a.name
                );
                last = t;
            }
        }
    }
    // The work of an exchange-based algorithm counts its rounds.
    let m = CostModel::default();
    let w = alg(Collective::Allreduce, "ring")
        .work(&m, 8, 1 << 20)
        .expect("counted");
    assert_eq!(w.rounds, 14.0);
    let w = alg(Collective::Allgather, "bruck")
        .work(&m, 5, 64)
        .expect("counted");
    assert_eq!(w.rounds, 3.0);
}

#[test]
fn a_missing_or_malformed_file_falls_back_to_the_defaults() {
    let dir = TempDir::new("fallback");
    // No file: the defaults, silently.
    let missing = dir.0.join("nothing.json");
    let a = model::load_or_default(Some(&missing));
    assert_eq!(a.source, Source::Builtin);
    assert_eq!(a.calibration, Calibration::builtin());
    // Disabled (TCA_MODEL_FILE=none): the defaults.
    assert_eq!(model::load_or_default(None).source, Source::Disabled);
    // Malformed: the defaults, and the reason, naming the file.
    for (i, bad) in [
        "{ not json",
        "{}",
        r#"{"format": "tca cost model", "version": 1, "ranks": []}"#,
        r#"{"format": "something else", "version": 1, "ranks": []}"#,
    ]
    .iter()
    .enumerate()
    {
        let p = dir.0.join(format!("bad{i}.json"));
        std::fs::write(&p, bad).unwrap();
        let a = model::load_or_default(Some(&p));
        match &a.source {
            Source::Fallback(path, e) => {
                assert_eq!(path, &p);
                assert!(e.contains(&p.display().to_string()), "{e}");
            }
            s => panic!("{bad}: {s:?}"),
        }
        assert_eq!(a.calibration, Calibration::builtin());
        assert!(a.describe().contains("built-in"), "{}", a.describe());
    }
}

#[test]
fn the_file_is_looked_for_where_the_docs_say() {
    let s = |x: &'static str| Some(OsStr::new(x));
    assert_eq!(
        model::model_path(s("/x/m.json"), s("/cfg"), s("/home/u")),
        Some(PathBuf::from("/x/m.json"))
    );
    assert_eq!(model::model_path(s("none"), s("/cfg"), s("/home/u")), None);
    assert_eq!(model::model_path(s(""), s("/cfg"), s("/home/u")), None);
    assert_eq!(
        model::model_path(None, s("/cfg"), s("/home/u")),
        Some(PathBuf::from("/cfg/tca/model.json"))
    );
    assert_eq!(
        model::model_path(None, s(""), s("/home/u")),
        Some(PathBuf::from("/home/u/.config/tca/model.json"))
    );
    assert_eq!(model::model_path(None, None, None), None);
    assert!(tca::env::KNOWN.contains(&tca::env::MODEL_FILE));
}

#[test]
fn bad_parameters_are_clear_errors() {
    let err = |c: &Calibration| c.validate().unwrap_err().to_string();
    for (field, v) in [
        ("delta", -1.0),
        ("beta", f64::NAN),
        ("gamma", f64::INFINITY),
    ] {
        let mut c = sample();
        let m = &mut c.ranks[0].all.model;
        match field {
            "delta" => m.delta = v,
            "beta" => m.beta = v,
            _ => m.gamma = v,
        }
        let e = err(&c);
        assert!(
            e.contains(field) && e.contains(">= 0") && e.contains("ranks 2"),
            "{e}"
        );
    }
    let mut c = sample();
    c.ranks[0]
        .collectives
        .get_mut("allreduce")
        .unwrap()
        .model
        .alpha = -0.5;
    let e = err(&c);
    assert!(e.contains("allreduce") && e.contains("alpha"), "{e}");

    let mut c = sample();
    c.ranks[1].ranks = 0;
    assert!(err(&c).contains("ranks = 0"), "{}", err(&c));
    let mut c = sample();
    c.ranks[1].ranks = 2;
    assert!(err(&c).contains("twice"), "{}", err(&c));
    let mut c = sample();
    c.ranks.clear();
    assert!(err(&c).contains("no rank counts"));
    let mut c = sample();
    c.version = 99;
    assert!(err(&c).contains("version 99"));
    let mut c = sample();
    let all = c.ranks[0].all.clone();
    c.ranks[0].collectives.insert("allreduse".into(), all);
    let e = err(&c);
    assert!(e.contains("allreduse") && e.contains("allreduce"), "{e}");
    let mut c = sample();
    c.ranks[0].all.model.knee = -4.0;
    assert!(err(&c).contains("knee"));
    let mut c = sample();
    c.ranks[0].all.model.cache = 0.0;
    assert!(err(&c).contains("cache"));

    // The same checks guard the parser and the saver.
    let mut c = sample();
    c.ranks[0].all.model.beta = -1.0;
    let text = c.to_json();
    assert!(Calibration::from_json(&text).is_err());
    let dir = TempDir::new("bad");
    assert!(c.save(&dir.0.join("m.json")).is_err());
    // A misspelt parameter is not silently zero.
    let text = sample().to_json().replacen("\"alpha\"", "\"alhpa\"", 1);
    let e = Calibration::from_json(&text).unwrap_err().to_string();
    assert!(e.contains("alhpa"), "{e}");
    // Parameter vectors of the wrong length.
    assert!(CostModel::from_params(&[0.0; 3], 0.0, MAX_CACHE).is_err());
    let mut p = [0.0; CostModel::PARAMS.len()];
    p[param("alpha")] = -1.0;
    assert!(CostModel::from_params(&p, 0.0, MAX_CACHE).is_err());
    p[param("alpha")] = 1.0;
    assert!(CostModel::from_params(&p, 0.0, MAX_CACHE).is_ok());
    for cache in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        let e = CostModel::from_params(&p, 0.0, cache)
            .unwrap_err()
            .to_string();
        assert!(e.contains("cache"), "{cache}: {e}");
    }
}

#[test]
fn communicators_select_from_their_table_and_forcing_still_wins() {
    let out = threads::run(4, |w| {
        let c = Comm::world(w)?;
        let active = &model::active().calibration;
        let mut same = true;
        for coll in Collective::ALL {
            for k in 0..23 {
                let b = 1usize << k;
                same &= std::ptr::eq(c.algorithm(coll, b), active.choose(coll, 4, b));
            }
        }
        c.force(Collective::Allreduce, Some("ring"))?;
        let forced = c.algorithm(Collective::Allreduce, 8).name;
        // And the collectives still agree across ranks with the chosen algorithms.
        let mut x = [w.rank() as f64; 300];
        c.force(Collective::Allreduce, None)?;
        c.allreduce_in_place(&mut x, &tca::Op::Sum)?;
        Ok((same, forced, x[0]))
    })
    .unwrap();
    for (same, forced, x) in out {
        assert!(same);
        assert_eq!(forced, "ring");
        assert_eq!(x, 6.0);
    }
}

/// Where the counting pass cannot price any algorithm (here: more ranks than its probes
/// fit), Auto still takes one that runs on that many ranks and that it would consider.
#[test]
fn uncountable_rank_counts_still_choose_an_algorithm_that_runs() {
    let c = Calibration::builtin();
    let p = 200_001;
    for coll in Collective::ALL {
        let a = c.choose(coll, p, 8);
        assert!((a.supports)(p), "{} {}", coll.name(), a.name);
        assert!(a.auto, "{} {}", coll.name(), a.name);
        assert!(a.work(&CostModel::default(), p, 8).is_err());
    }
}
