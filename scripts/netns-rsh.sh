#!/bin/sh
# A remote-shell agent for Open MPI and MPICH over network namespaces: the "host" is an
# address, the command a shell line (as ssh would get it). Hosts are those of
# scripts/netns.sh (10.77.9.K: namespace K, tca-a for 1), or, when NETNS_MAP is set
# (`ADDR=NAMESPACE,...`, as the tests' namespaces are), looked up there. Leading option words
# without an argument (MPICH's hydra passes -x) are skipped.
while [ "${1#-}" != "$1" ]; do shift; done
if [ -n "${NETNS_MAP:-}" ]; then
  ns=$(echo "$NETNS_MAP" | tr ',' '\n' | awk -F= -v h="$1" '$1 == h { print $2 }')
  [ -n "$ns" ] || { echo "unknown host $1 (not in NETNS_MAP)" >&2; exit 1; }
else
  case "$1" in
  10.77.9.[1-9]) ns=tca-$(echo abcdefghi | cut -c "${1#10.77.9.}") ;;
  *) echo "unknown host $1" >&2; exit 1 ;;
  esac
fi
shift
# A host name of its own per namespace (a new UTS namespace): Open MPI takes processes with one
# host name for one node, and its TCP transport failed between namespaces that shared one.
exec ip netns exec "$ns" unshare --uts /bin/sh -c "echo $ns > /proc/sys/kernel/hostname && $*"
