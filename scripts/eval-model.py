#!/usr/bin/env python3
"""How well tca's cost models predict, and how Auto compares with every algorithm forced.

For Allreduce, Allgather and Bcast, runs `tca bench BENCH --model` (Auto: the library's choice
and its prediction) and `tca bench BENCH --algo BENCH=ALG` for each algorithm, each K times in
shuffled order (each run timing every size twice), keeps the fastest time of each size, and
prints measured vs predicted with the error, and Auto against the fastest forced algorithm.

usage: scripts/eval-model.py NP K [MODEL_FILE]   (after `cargo build --release`;
       $TCA overrides the binary, target/release/tca)"""
import json, os, random, subprocess, sys
np_, K = int(sys.argv[1]), int(sys.argv[2])
env = dict(os.environ)
if len(sys.argv) > 3:
    env["TCA_MODEL_FILE"] = sys.argv[3]
TCA = os.environ.get("TCA", "target/release/tca")
BENCH = {"Allreduce": ["dissemination", "flat", "rabenseifner", "recursive_doubling", "ring"],
         "Allgather": ["bruck", "recursive_doubling", "ring"],
         "Bcast": ["binomial", "flat", "pipeline", "scatter_allgather"]}
SIZES = "8:4M"
REPEAT = "2"
def run(args):
    out = subprocess.run([TCA, "bench", *args, "--np", str(np_), "--sizes", SIZES, "--repeat", REPEAT,
                          "--format", "json"], env=env, capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        sys.exit(out.stderr)
    return json.loads(out.stdout)
jobs = [(b, None) for b in BENCH] + [(b, a) for b, algs in BENCH.items() for a in algs]
auto_best, pred, forced = {}, {}, {}
for k in range(K):
    order = jobs[:]
    random.shuffle(order)
    for b, a in order:
        if a is None:
            d = run([b, "--model"])
            for p in d["model"]["predictions"]:
                key = (p["benchmark"], p["bytes"])
                if key not in auto_best or p["measured_us"] < auto_best[key][0]:
                    auto_best[key] = (p["measured_us"], p["algorithm"])
                pred[key] = (p["predicted_us"], p["algorithm"])
        else:
            d = run([b, "--algo", f"{b}={a}"])
            for r in d["rows"]:
                key = (b, r["bytes"], a)
                forced[key] = min(forced.get(key, 1e30), r["t_avg_us"])
    print(f"round {k+1} of {K} done", file=sys.stderr)
print(f"{np_} ranks, fastest of {K} runs (each timing every size {REPEAT}x)")
print(f"{'benchmark':<10}{'bytes':>9} {'auto':<19}{'measured':>10}{'model':>10}{'error':>8}  {'best forced':<19}{'time':>10}{'auto/best':>10}")
worst = {}
slow = []
for (b, n), (m, alg) in sorted(auto_best.items(), key=lambda x: (x[0][0], x[0][1])):
    pu, palg = pred[(b, n)]
    err = 100 * (pu - m) / m
    if abs(err) > abs(worst.get(b, (0, 0))[0]):
        worst[b] = (err, n)
    fb = min(((t, a) for (bb, nn, a), t in forced.items() if bb == b and nn == n), default=(float('nan'), '-'))
    ratio = m / fb[0]
    if ratio > 1.10:
        slow.append((b, n, alg, fb[1], ratio))
    print(f"{b:<10}{n:>9} {alg:<19}{m:>10.3f}{pu:>10.3f}{err:>+7.1f}%  {fb[1]:<19}{fb[0]:>10.3f}{ratio:>10.2f}")
print("worst error:", ", ".join(f"{b} {e:+.1f}% at {n} B" for b, (e, n) in worst.items()))
print("auto more than 10% slower than the best forced algorithm:", "; ".join(f"{b} {n} B ({a} vs {f}, {r:.2f}x)" for b, n, a, f, r in slow) or "none")
