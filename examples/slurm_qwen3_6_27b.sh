#!/bin/bash
# The production run of configs/qwen3_6_27b.yaml on a SLURM cluster, in two phases.
#
#   regen   every node serves Qwen3.6-27B with vLLM, one server per TP GPUs (two per 8-GPU node at TP 4); the
#           first node runs sources -> templates -> convert -> regenerate -> tokenization with regenerate.endpoint
#           set to ALL the servers (dflash_nb spreads the requests, at most regenerate.concurrency in flight on
#           each, retries a failed request on another server and takes a dead server out of rotation); then the
#           servers are stopped.
#   train   torchrun on every node (8 GPUs each) trains the drafter with online target features; then the first
#           node runs the evaluation (`--from evaluate`: the earlier stages are not rechecked, so the servers of
#           phase 1 need not exist any more).
#
#   sbatch --nodes 4 examples/slurm_qwen3_6_27b.sh                 # both phases in one allocation
#   sbatch --nodes 4 --export ALL,PHASE=regen examples/slurm_qwen3_6_27b.sh
#   sbatch --nodes 2 --export ALL,PHASE=train examples/slurm_qwen3_6_27b.sh
#   PRINT_ONLY=1 NODES="n1 n2" bash examples/slurm_qwen3_6_27b.sh  # print the commands, run nothing (no SLURM needed)
#
# A job that dies is resubmitted as it is: regeneration resumes from its finished chunks (the chunk files do not
# depend on the servers' addresses), training from its last checkpoint. Once phase 1 has finished, go on with
# PHASE=train: rerunning phase 1 on other nodes changes regenerate.endpoint, and a changed parameter makes the
# stage (and all after it) run again.
#
#SBATCH --job-name=dflash-qwen3.6-27b
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=32
#SBATCH --time=7-00:00:00
#SBATCH --output=logs/%x-%j.out
set -euo pipefail

CONFIG=${CONFIG:-configs/qwen3_6_27b.yaml}
RUN_DIR=${RUN_DIR:-runs/qwen3_6_27b}          # run.runs_dir/run.name of the config, on a filesystem every node sees
MODEL=${MODEL:-Qwen/Qwen3.6-27B}              # = regenerate.served_model
PHASE=${PHASE:-all}                           # regen | train | all
TP=${TP:-4}                                   # GPUs per vLLM server (plan.regen_tp)
GPUS_PER_NODE=${GPUS_PER_NODE:-8}
PORT=${PORT:-8000}                            # servers of a node listen on PORT, PORT+1, ...
VLLM=${VLLM:-vllm}                            # the vllm executable (its own environment is fine)
DFLASH=${DFLASH:-dflash-nb}                   # the dflash-nb executable
SERVER_WAIT_S=${SERVER_WAIT_S:-3600}          # loading 27B weights on a cold cache takes a while
LOGS=${LOGS:-logs}

read -r -a NODES <<< "${NODES:-$(scontrol show hostnames "${SLURM_JOB_NODELIST:?run under sbatch, or set NODES}" | tr '\n' ' ')}"
HEAD=${NODES[0]}
PER_NODE=$((GPUS_PER_NODE / TP))
run() { if [ -n "${PRINT_ONLY:-}" ]; then echo "+ $*"; else "$@"; fi; }
mkdir -p "$LOGS"

endpoints() {   # every server's /v1 base, comma-separated (regenerate.endpoint takes a list or such a string)
  local out=() n i
  for n in "${NODES[@]}"; do for ((i = 0; i < PER_NODE; i++)); do out+=("http://$n:$((PORT + i))/v1"); done; done
  (IFS=,; echo "${out[*]}")
}

serve() {       # on every node, one vLLM server per TP GPUs; returns once the servers are launched
  local script="
    for ((i = 0; i < $PER_NODE; i++)); do
      gpus=\$(seq -s, \$((i * $TP)) \$((i * $TP + $TP - 1)))
      CUDA_VISIBLE_DEVICES=\$gpus $VLLM serve $MODEL --tensor-parallel-size $TP --port \$(($PORT + i)) \\
          --enable-prefix-caching > $LOGS/vllm-\$(hostname)-\$i.log 2>&1 &
    done
    wait"
  run srun --nodes "${#NODES[@]}" --ntasks-per-node 1 --kill-on-bad-exit=0 bash -c "$script" &
  SERVERS=$!
}

wait_for_servers() {   # until every server lists its model (the run also starts with some: dead ones sit out)
  local e up t0=$SECONDS
  while true; do
    up=0
    for e in ${1//,/ }; do curl -sf -m 5 "$e/models" > /dev/null && up=$((up + 1)); done
    echo "servers up: $up of $(echo "${1//,/ }" | wc -w)"
    [ "$up" -eq "$(echo "${1//,/ }" | wc -w)" ] && return 0
    if [ $((SECONDS - t0)) -gt "$SERVER_WAIT_S" ]; then
      [ "$up" -gt 0 ] && { echo "going on with $up server(s)"; return 0; }
      echo "no server came up in $SERVER_WAIT_S s: see $LOGS/vllm-*.log" >&2; return 1
    fi
    sleep 30
  done
}

phase_regen() {
  local eps; eps=$(endpoints)
  echo "regeneration against: $eps"
  serve
  [ -n "${PRINT_ONLY:-}" ] || wait_for_servers "$eps"
  run "$DFLASH" run "$CONFIG" --until train --set "regenerate.endpoint=$eps"
  [ -n "${PRINT_ONLY:-}" ] || { kill "$SERVERS" 2> /dev/null || true; wait "$SERVERS" 2> /dev/null || true; }
}

phase_train() {
  run srun --nodes "${#NODES[@]}" --ntasks-per-node 1 torchrun --nnodes "${#NODES[@]}" \
      --nproc_per_node "$GPUS_PER_NODE" --rdzv_id "${SLURM_JOB_ID:-dflash}" --rdzv_backend c10d \
      --rdzv_endpoint "$HEAD:29500" --no-python "$DFLASH" train "$RUN_DIR" "$CONFIG"
  run "$DFLASH" run "$CONFIG" --from evaluate
}

case "$PHASE" in
  regen) phase_regen ;;
  train) phase_train ;;
  all) phase_regen; phase_train ;;
  *) echo "PHASE must be regen, train or all, not $PHASE" >&2; exit 2 ;;
esac
