#!/usr/bin/env bash
# GSM8K: GRPO (n=16) vs GRPO-PODS (n=64, keep m=16 by max-variance) in verl's V1 trainer on
# one GPU node, with the paper's single-GPU hyperparameters where verl has them (the paper, arXiv 2504.13818, and its official code):
# LoRA rank/alpha 64 on all linear layers, lr 5e-6, AdamW betas (0.9, 0.99), weight decay
# 0.1, grad clip 0.1, no KL, temperature 0.9, 512-token prompts and responses, GRPO
# advantages normalised by the group std, the loss averaged per sequence then over
# sequences (loss_agg_mode seq-mean-token-mean), validation sampled 5 times at T=0.9.
# Differences: verl's own GSM8K prompt and reward (examples/data_preprocess/gsm8k.py), 8
# prompts per step instead of 1 (verl splits a step over the GPUs), 8 GPUs, one epoch
# instead of a 6-hour budget (verl counts steps, not training time). NOT RUN HERE: pods's
# CI has no GPU; the sampler itself is tested on CPU against verl 0.9.1
# (tests/integrations/test_verl.py), including verl's loading of it from this config path.
#
#   pip install -e '.[verl]' vllm   # in pods's clone; verl 0.9.x, with TransferQueue
#   (pip install 'pods-rl[verl]' vllm once pods-rl is on PyPI)
#   python examples/data_preprocess/gsm8k.py --local_save_dir ~/data/gsm8k   (verl's script)
#   VARIANT=grpo bash configs/verl/gsm8k_grpo_vs_pods.sh
#   VARIANT=pods bash configs/verl/gsm8k_grpo_vs_pods.sh
set -xeuo pipefail

VARIANT=${VARIANT:-pods}
MODEL_PATH=${MODEL_PATH:-Qwen/Qwen2.5-3B-Instruct}
DATA_DIR=${DATA_DIR:-$HOME/data/gsm8k}
NGPUS=${NGPUS:-8}
TRAIN_BATCH_SIZE=${TRAIN_BATCH_SIZE:-8}   # prompts per step
M=16                                      # rollouts per prompt in the update

if [ "$VARIANT" = pods ]; then
    N=64
    # PODS leaves TRAIN_BATCH_SIZE*M rows, but verl counts a mini-batch as
    # ppo_mini_batch_size*rollout.n rows: one mini-batch of all kept rows is
    # ppo_mini_batch_size = TRAIN_BATCH_SIZE*M/N (the sampler checks it at start).
    PPO_MINI_BATCH_SIZE=$((TRAIN_BATCH_SIZE * M / N))
    SAMPLER=(
        trainer.v1.sampler.custom_sampler.path=pkg://pods.integrations.verl
        trainer.v1.sampler.custom_sampler.name=PODSReplayBuffer
        +trainer.v1.sampler.sampler_kwargs.pods_m=${M}
        +trainer.v1.sampler.sampler_kwargs.pods_rule=max_variance
        +trainer.v1.sampler.sampler_kwargs.pods_n=${N}
        +trainer.v1.sampler.sampler_kwargs.pods_train_batch_size=${TRAIN_BATCH_SIZE}
        +trainer.v1.sampler.sampler_kwargs.pods_ppo_mini_batch_size=${PPO_MINI_BATCH_SIZE}
    )
else
    N=16
    PPO_MINI_BATCH_SIZE=${TRAIN_BATCH_SIZE}
    SAMPLER=()
fi

python3 -m verl.trainer.main_ppo \
    algorithm.adv_estimator=grpo \
    algorithm.norm_adv_by_std_in_grpo=True \
    algorithm.use_kl_in_reward=False \
    data.train_files="$DATA_DIR/train.parquet" \
    data.val_files="$DATA_DIR/test.parquet" \
    data.train_batch_size=${TRAIN_BATCH_SIZE} \
    data.max_prompt_length=512 \
    data.max_response_length=512 \
    data.filter_overlong_prompts=True \
    actor_rollout_ref.model.path=${MODEL_PATH} \
    actor_rollout_ref.model.lora_rank=64 \
    actor_rollout_ref.model.lora_alpha=64 \
    actor_rollout_ref.model.target_modules=all-linear \
    actor_rollout_ref.model.enable_gradient_checkpointing=True \
    actor_rollout_ref.actor.optim.lr=5e-6 \
    actor_rollout_ref.actor.optim.betas=[0.9,0.99] \
    actor_rollout_ref.actor.optim.weight_decay=0.1 \
    actor_rollout_ref.actor.grad_clip=0.1 \
    actor_rollout_ref.actor.use_kl_loss=False \
    actor_rollout_ref.actor.entropy_coeff=0 \
    actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean \
    actor_rollout_ref.actor.ppo_mini_batch_size=${PPO_MINI_BATCH_SIZE} \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4 \
    actor_rollout_ref.rollout.name=vllm \
    actor_rollout_ref.rollout.n=${N} \
    actor_rollout_ref.rollout.temperature=0.9 \
    actor_rollout_ref.rollout.val_kwargs.n=5 \
    actor_rollout_ref.rollout.val_kwargs.temperature=0.9 \
    actor_rollout_ref.rollout.val_kwargs.do_sample=True \
    actor_rollout_ref.rollout.gpu_memory_utilization=0.4 \
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8 \
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8 \
    trainer.use_v1=True \
    trainer.v1.trainer_mode=sync \
    "${SAMPLER[@]}" \
    trainer.n_gpus_per_node=${NGPUS} \
    trainer.nnodes=1 \
    trainer.project_name=pods_gsm8k \
    trainer.experiment_name=${VARIANT}_n${N}_m${M} \
    trainer.logger='["console"]' \
    trainer.total_epochs=1 \
    trainer.test_freq=10 \
    "$@"
