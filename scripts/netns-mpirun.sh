#!/bin/sh
# An mpirun across the namespaces of scripts/netns.sh (NETNS_NODES of them, default 2;
# NETNS_SLOTS ranks per namespace, default 1), for `tca bench --compare mpi --mpirun
# scripts/netns-mpirun.sh`. Open MPI's by default (TCP BTL over the bridge); NETNS_MPI=mpich
# for MPICH's hydra (its UCX over TCP), with a tca built against MPICH (MPICC=mpicc.mpich).
# Run it inside namespace tca-a; for Open MPI set OMPI_MCA_btl=tcp,self (BENCHMARKS.md,
# "Across nodes").
case "$1" in --version) [ "${NETNS_MPI:-}" = mpich ] && exec mpiexec.hydra --version; exec mpirun --version ;; esac
here=$(cd "$(dirname "$0")" && pwd)
s=${NETNS_SLOTS:-1}
hosts=$(seq 1 "${NETNS_NODES:-2}" | sed "s/.*/10.77.9.&:$s/" | paste -sd, -)
if [ "${NETNS_MPI:-openmpi}" = mpich ]; then
  exec mpiexec.hydra -launcher ssh -launcher-exec "$here/netns-rsh.sh" -iface tca-v \
    -hosts "$hosts" -genv UCX_TLS tcp,self "$@"
fi
exec mpirun --host "$hosts" --oversubscribe --mca plm_rsh_agent "$here/netns-rsh.sh" \
  --mca pml ob1 --bind-to none --mca btl_tcp_if_include 10.77.9.0/24 \
  --mca oob_tcp_if_include 10.77.9.0/24 "$@"
