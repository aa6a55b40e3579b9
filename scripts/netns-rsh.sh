#!/bin/sh
# A remote-shell agent for Open MPI and MPICH over the namespaces of scripts/netns.sh: the "host" is an
# address, the command a shell line (as ssh would get it). Leading option words without an
# argument (MPICH's hydra passes -x) are skipped.
while [ "${1#-}" != "$1" ]; do shift; done
case "$1" in 10.77.9.1) ns=tca-a ;; 10.77.9.2) ns=tca-b ;; *) echo "unknown host $1" >&2; exit 1 ;; esac
shift
exec ip netns exec "$ns" /bin/sh -c "$*"
