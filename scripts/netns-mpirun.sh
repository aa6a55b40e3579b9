#!/bin/sh
# Open MPI's mpirun with one rank per namespace of scripts/netns.sh (or two per namespace with
# NETNS_SLOTS=2), over its TCP transport, for `tca bench --compare mpi --mpirun` (see
# BENCHMARKS.md, "Across nodes"). Run it inside namespace tca-a; set OMPI_MCA_btl=tcp,self.
case "$1" in --version) exec mpirun --version ;; esac
here=$(cd "$(dirname "$0")" && pwd)
s=${NETNS_SLOTS:-1}
exec mpirun --host "10.77.9.1:$s,10.77.9.2:$s" --oversubscribe --mca plm_rsh_agent "$here/netns-rsh.sh" \
  --mca pml ob1 --bind-to none --mca btl_tcp_if_include 10.77.9.0/24 \
  --mca oob_tcp_if_include 10.77.9.0/24 "$@"
