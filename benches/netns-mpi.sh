#!/usr/bin/env bash
# Issue 5's cross-machine benchmark on one host: two network namespaces joined by a veth pair
# whose both ends are rate-limited (tc tbf; this kernel has no netem, so no added delay), NP/2
# MPI ranks in each (NP=2 by default: one), Open MPI's TCP transport over the link; with NP=4
# the ranks 0,1 share namespace A and 2,3 namespace B, as mpirun fills two two-slot machines. TP, TP + SP and async TP alternate
# in one job (`--compare tp,sp,async`); the report's "time in collectives" is each mode's
# exposed communication (for async TP: what its GEMMs did not hide). Run as root; the
# namespaces are removed on exit. Usage: [MPIRUN_ARGS=...] benches/netns-mpi.sh [build-dir] [rate...]
# (e.g. MPIRUN_ARGS='--mca btl_tcp_progress_thread 0' to run without Open MPI's progress thread)
# JOBS='name:loom args;name:loom args' runs those layouts instead of the TP/SP/async comparison,
# alternating ROUNDS times, each with the bytes that crossed the link per iteration (both
# directions, MPI's start-up included), e.g. JOBS='tp=2:-tp 2;pp=2:-pp 2'. CONFIG=path runs
# that config instead of configs/$MODEL.json; BATCH, LEN and OUTPUT size each pass (1, 2048, 1).
set -euo pipefail
cd "$(dirname "$0")/.."
loom=$(realpath "${1:-build}")/loom
shift || true
rates=("${@:-1gbit 10gbit}")
a=loomA b=loomB
cleanup() { ip netns del $a 2>/dev/null || true; ip netns del $b 2>/dev/null || true; rm -f "$agent" "$hosts"; }
agent=$(mktemp) hosts=$(mktemp)
trap cleanup EXIT
ip netns add $a
ip netns add $b
ip link add vA netns $a type veth peer name vB netns $b
ip -n $a addr add 10.77.0.1/24 dev vA
ip -n $b addr add 10.77.0.2/24 dev vB
for ns in $a $b; do ip -n $ns link set lo up; done
ip -n $a link set vA up
ip -n $b link set vB up
# mpirun (in namespace A) starts the remote rank through this "rsh": like ssh it gets the host
# and one command line, which it runs in namespace B.
cat > "$agent" <<AGENT
#!/bin/sh
host=\$1; shift
case \$host in 10.77.0.2) exec ip netns exec $b sh -c "\$*" ;; *) exec sh -c "\$*" ;; esac
AGENT
chmod +x "$agent"
np=${NP:-2}
printf '10.77.0.1 slots=%d\n10.77.0.2 slots=%d\n' $((np / 2)) $((np / 2)) > "$hosts"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# one bench latency job across the two namespaces; extra arguments go to loom
bench() {
  ip netns exec $a mpirun -np "$np" --bind-to none ${MPIRUN_ARGS:-} --hostfile "$hosts" --mca plm_rsh_agent "$agent" \
    --mca btl self,tcp --mca btl_tcp_if_include 10.77.0.0/24 --mca oob_tcp_if_include 10.77.0.0/24 \
    "$loom" bench latency -m "${CONFIG:-$PWD/configs/${MODEL:-llama-3.2-1b}.json}" --load-format dummy --backend mpi --threads 1 \
    --batch-size ${BATCH:-1} --input-len ${LEN:-2048} --output-len ${OUTPUT:-1} --num-iters-warmup ${WARMUP:-1} --num-iters ${ITERS:-2} \
    --profile "$@" 2>/dev/null
}
link_bytes() {
  echo $(( $(ip netns exec $a cat /sys/class/net/vA/statistics/tx_bytes) +
           $(ip netns exec $a cat /sys/class/net/vA/statistics/rx_bytes) ))
}
# one JOBS entry: its report and the link's bytes per iteration (warm-up ones included)
layout() {
  local name=${1%%:*} args=${1#*:} before after
  before=$(link_bytes)
  # shellcheck disable=SC2086
  bench $args > /tmp/loom-netns-job.txt
  after=$(link_bytes)
  echo "== $name ($args)"
  grep -E "^(Avg latency|Prefill|Decode|Rank|waiting|experts|  per layer)" /tmp/loom-netns-job.txt
  echo "link: $(( (after - before) / (${WARMUP:-1} + ${ITERS:-2}) )) bytes per iteration"
}
for rate in ${rates[*]}; do
  for dev in "$a vA" "$b vB"; do
    set -- $dev
    ip netns exec "$1" tc qdisc replace dev "$2" root tbf rate "$rate" burst 256kb latency 100ms
  done
  echo "== link $rate, $(basename "${CONFIG:-${MODEL:-llama-3.2-1b}}" .json), batch ${BATCH:-1}, input ${LEN:-2048}, output ${OUTPUT:-1}, $((np / 2)) MPI rank(s) per namespace"
  if [ -n "${JOBS:-}" ]; then
    IFS=';' read -ra jobs <<< "$JOBS"
    for round in $(seq "${ROUNDS:-1}"); do
      for job in "${jobs[@]}"; do layout "$job"; done
    done
    continue
  fi
  bench --compare tp,sp,async | grep -E "^(== mode|Avg latency|Rank|waiting)"
  # loom gives MPI a progress thread only when async TP runs (it slows plain collectives), so
  # the job above runs TP with it: TP as loom runs it alone, for comparison
  echo "== mode tp, alone (no progress thread)"
  bench | grep -E "^(Avg latency|Rank|waiting)"
done
