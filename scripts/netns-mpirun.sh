#!/bin/sh
# An mpirun across the namespaces of scripts/netns.sh (one rank per namespace; NETNS_SLOTS
# per namespace), for `tca bench --compare mpi --mpirun scripts/netns-mpirun.sh`. Open MPI's
# by default (TCP BTL on the veth pair); NETNS_MPI=mpich for MPICH's hydra (its UCX over TCP),
# with a tca built against MPICH (MPICC=mpicc.mpich). Run it inside namespace tca-a; for Open
# MPI set OMPI_MCA_btl=tcp,self (BENCHMARKS.md, "Across nodes").
case "$1" in --version) [ "${NETNS_MPI:-}" = mpich ] && exec mpiexec.hydra --version; exec mpirun --version ;; esac
here=$(cd "$(dirname "$0")" && pwd)
s=${NETNS_SLOTS:-1}
if [ "${NETNS_MPI:-openmpi}" = mpich ]; then
  exec mpiexec.hydra -launcher ssh -launcher-exec "$here/netns-rsh.sh" -iface tca-va \
    -hosts "10.77.9.1:$s,10.77.9.2:$s" -genv UCX_TLS tcp,self "$@"
fi
exec mpirun --host "10.77.9.1:$s,10.77.9.2:$s" --oversubscribe --mca plm_rsh_agent "$here/netns-rsh.sh" \
  --mca pml ob1 --bind-to none --mca btl_tcp_if_include 10.77.9.0/24 \
  --mca oob_tcp_if_include 10.77.9.0/24 "$@"
