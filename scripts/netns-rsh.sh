#!/bin/sh
# A remote-shell agent for Open MPI and MPICH over the namespaces of scripts/netns.sh: the "host" is an
# address (10.77.9.K: namespace K, tca-a for 1), the command a shell line (as ssh would get
# it). Leading option words without an argument (MPICH's hydra passes -x) are skipped.
while [ "${1#-}" != "$1" ]; do shift; done
case "$1" in
10.77.9.[1-9]) ns=tca-$(echo abcdefghi | cut -c "${1#10.77.9.}") ;;
*) echo "unknown host $1" >&2; exit 1 ;;
esac
shift
# A host name of its own per namespace (a new UTS namespace): Open MPI takes processes with one
# host name for one node, and its TCP transport failed between namespaces that shared one.
exec ip netns exec "$ns" unshare --uts /bin/sh -c "echo $ns > /proc/sys/kernel/hostname && $*"
