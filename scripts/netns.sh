#!/usr/bin/env bash
# Two "nodes" on one machine for trying tca (and an MPI) across a real network stack:
# network namespaces tca-a and tca-b joined by a veth pair, 10.77.9.1 <-> 10.77.9.2.
#   scripts/netns.sh up      # as root
#   scripts/netns.sh down
# Then, for example (ranks spread one per namespace, started with `ip netns exec`):
#   ip netns exec tca-a env TCA_HOSTS=tca-a:1,tca-b:1 TCA_RSH="ip netns exec" \
#     TCA_KV_HOST=10.77.9.1 FI_PROVIDER=tcp target/release/tca bench PingPong --np 2
set -euo pipefail
case "${1:-}" in
up)
  ip netns add tca-a
  ip netns add tca-b
  ip link add tca-va type veth peer name tca-vb
  ip link set tca-va netns tca-a
  ip link set tca-vb netns tca-b
  ip -n tca-a addr add 10.77.9.1/24 dev tca-va
  ip -n tca-b addr add 10.77.9.2/24 dev tca-vb
  for ns in tca-a tca-b; do ip -n "$ns" link set lo up; done
  ip -n tca-a link set tca-va up
  ip -n tca-b link set tca-vb up
  ;;
down)
  for ns in tca-a tca-b; do
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null || true
  done
  ;;
*) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
