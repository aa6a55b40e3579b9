#!/usr/bin/env bash
# Coverage-guided fuzzing of tca's readers with AFL++ (through cargo-afl, on stable Rust).
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]
#
# Builds the harness in fuzz/ instrumented, then runs afl-fuzz on each target (default: all
# of tca_tests::TARGETS, as `tca-fuzz --list` prints them) for SECONDS (default 10), seeded from fuzz/corpus/TARGET, and prints
# per target: executions, corpus entries found, edges covered, crashes, hangs. A crash or
# hang is copied to fuzz/findings/TARGET/ and the script exits 1; turn each into a
# regression input (fuzz/regressions/TARGET/, run by `cargo test -p tca-tests --test fuzz`)
# once fixed. FUZZ_OUT (default target/fuzz) holds AFL's working directories.
set -euo pipefail
cd "$(dirname "$0")/.."

secs=${1:-10}
shift || true
targets=("$@")
out=${FUZZ_OUT:-target/fuzz}

if ! command -v cargo-afl >/dev/null 2>&1; then
  echo "installing cargo-afl (crates.io)"
  cargo install --locked cargo-afl >/dev/null
fi
# AFL++ itself is built once per Rust toolchain; `--build` refuses when it already is.
if ! msg=$(cargo afl config --build 2>&1); then
  case "$msg" in
    *"already built"*) ;;
    *) echo "$msg"; exit 1 ;;
  esac
fi
(cd fuzz && cargo afl build --release --quiet)
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(fuzz/target/release/tca-fuzz --list)
fi

# A VM: no CPU frequency control, no core-dump handler to configure, cores shared.
export AFL_SKIP_CPUFREQ=1 AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1 AFL_NO_AFFINITY=1
export AFL_NO_UI=1

stat() { sed -n "s/^$1 *: *//p" "$2"; }
mkdir -p "$out"
status=0
printf '%-12s %10s %8s %10s %8s %6s\n' target execs "exec/s" corpus edges crashes
for t in "${targets[@]}"; do
  rm -rf "${out:?}/$t"
  # -t: a parser that takes a second on one input is a hang worth reporting.
  cargo afl fuzz -V "$secs" -t 1000 -i "fuzz/corpus/$t" -o "$out/$t" \
    -- fuzz/target/release/tca-fuzz "$t" >"$out/$t.log" 2>&1 || {
    echo "afl-fuzz failed on $t (see $out/$t.log):"; tail -20 "$out/$t.log"; exit 1; }
  s="$out/$t/default/fuzzer_stats"
  crashes=$(stat saved_crashes "$s")
  hangs=$(stat saved_hangs "$s")
  printf '%-12s %10s %8s %10s %8s %6s' "$t" "$(stat execs_done "$s")" \
    "$(stat execs_per_sec "$s")" "$(stat corpus_count "$s")" "$(stat edges_found "$s")" "$crashes"
  [ "$hangs" = 0 ] || printf ' (%s hangs)' "$hangs"
  echo
  if [ "$crashes" != 0 ] || [ "$hangs" != 0 ]; then
    mkdir -p "fuzz/findings/$t"
    cp "$out/$t"/default/crashes/id* "$out/$t"/default/hangs/id* "fuzz/findings/$t/" 2>/dev/null || true
    status=1
  fi
done
exit $status
