#!/usr/bin/env bash
# "Nodes" on one machine for trying tca (and an MPI) across a real network stack: N network
# namespaces tca-a, tca-b, ... (N from 2 to 9, default 2), each with an interface tca-v at
# 10.77.9.1, 10.77.9.2, ..., all ports of one bridge (in namespace tca-sw).
#   scripts/netns.sh up [N]   # as root
#   scripts/netns.sh down
# Then, for example (ranks spread one per namespace, started with `ip netns exec`):
#   ip netns exec tca-a env TCA_HOSTS=tca-a:1,tca-b:1 TCA_RSH="ip netns exec" \
#     TCA_KV_HOST=10.77.9.1 FI_PROVIDER=tcp target/release/tca bench PingPong --np 2
# and scripts/netns-mpirun.sh (NETNS_NODES=N) for an MPI across the same namespaces.
set -euo pipefail
letters=abcdefghi
case "${1:-}" in
up)
  n=${2:-2}
  case "$n" in [2-9]) ;; *) echo "$0 up N: N from 2 to 9, got $n" >&2; exit 2 ;; esac
  ip netns add tca-sw
  ip -n tca-sw link add sw type bridge
  ip -n tca-sw link set sw up
  for i in $(seq 1 "$n"); do
    ns=tca-${letters:i-1:1}
    ip netns add "$ns"
    ip link add tca-v netns "$ns" type veth peer name "p$i" netns tca-sw
    ip -n tca-sw link set "p$i" master sw up
    ip -n "$ns" addr add "10.77.9.$i/24" dev tca-v
    ip -n "$ns" link set tca-v up
    ip -n "$ns" link set lo up
  done
  ;;
down)
  for ns in tca-sw $(for i in $(seq 0 8); do echo "tca-${letters:i:1}"; done); do
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null || true
  done
  ;;
*) echo "usage: $0 up [N] | down" >&2; exit 2 ;;
esac
