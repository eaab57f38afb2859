#!/usr/bin/env bash
# verl's trainer with vLLM rollout replicas, profiled by verlprof on a GPU host.
#
# The same selection as tests/integration/test_verl_fit_cpu.py runs on CPU with a stand-in
# engine: nsys on steps 2 and 3, the actor's rank 0 and with it the rollout replica that owns
# global rank 0, every report in one directory with its manifest, then `verlprof report`.
# Needs verl 0.9.1 with vLLM and a CUDA GPU (verl's own images have both), verlprof
# (`pip install 'verlprof[verl]'`), nsys on PATH, a model and verl's GSM8K parquet files
# (verl's examples/data_preprocess/gsm8k.py writes them).
#
# Environment: MODEL (default Qwen/Qwen2.5-0.5B-Instruct), DATA (default ~/data/gsm8k),
# OUT (default outputs/verl_rollout_gpu), N_GPUS (default 1), TP (default 1),
# PLAN_ONLY=1 to print the plan and stop (no GPU needed).
set -euo pipefail

MODEL=${MODEL:-Qwen/Qwen2.5-0.5B-Instruct}
DATA=${DATA:-$HOME/data/gsm8k}
OUT=${OUT:-outputs/verl_rollout_gpu}
N_GPUS=${N_GPUS:-1}
TP=${TP:-1}
PYTHON=${PYTHON:-python3}

overrides=(
  algorithm.adv_estimator=grpo
  "data.train_files=$DATA/train.parquet" "data.val_files=$DATA/test.parquet"
  data.train_batch_size=16 data.max_prompt_length=512 data.max_response_length=256
  "actor_rollout_ref.model.path=$MODEL"
  actor_rollout_ref.actor.ppo_mini_batch_size=16
  actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4
  actor_rollout_ref.rollout.name=vllm actor_rollout_ref.rollout.n=2
  "actor_rollout_ref.rollout.tensor_model_parallel_size=$TP"
  actor_rollout_ref.rollout.gpu_memory_utilization=0.4
  actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4
  actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4
  "trainer.n_gpus_per_node=$N_GPUS" trainer.nnodes=1 trainer.total_training_steps=3
  "trainer.logger=[console]" trainer.val_before_train=false trainer.save_freq=-1
  trainer.test_freq=-1
  # verlprof: verl's own profiler keys
  global_profiler.tool=nsys "global_profiler.steps=[2,3]" "global_profiler.save_path=$OUT"
  actor_rollout_ref.actor.profiler.enable=true "actor_rollout_ref.actor.profiler.ranks=[0]"
)

"$PYTHON" -m verlprof.bridges.verl --plan "${overrides[@]}"
if [ "${PLAN_ONLY:-0}" = "1" ]; then
  exit 0
fi
"$PYTHON" -m verlprof.bridges.verl "${overrides[@]}"
verlprof report "$OUT" --strict
