"""The groups of one training step: how rollouts are generated, which are kept, and how the
policy is updated on them.

Baselines are configurations of one loop:
    GRPO        n == m                       (e.g. n=16, m=16)
    GRPO-PODS   n > m with a rule            (e.g. n=64, m=16, rule=max_variance)
    GRPO-GA     n == m large, small micro-batch (e.g. n=64, m=64, micro_batch_size=128)
    batch-level n > m, selection=batch: P*m kept across the step's prompts (beyond the paper)
"""

from __future__ import annotations

from dataclasses import dataclass

from pods.config.fields import Bf16Updates, HfDecode, Schedule, Switch, UpdateLayout, leaf
from pods.core.advantages import Scale
from pods.core.correction import Correction
from pods.core.loss import Norm
from pods.core.selection import Scope


@dataclass(frozen=True)
class RolloutConfig:
    prompts_per_step: int = leaf(8, "P: prompts sampled per step.")
    n: int = leaf(64, "Rollouts generated per prompt.")
    temperature: float = leaf(1.0, "Sampling temperature of the rollouts.")
    max_new_tokens: int = leaf(8, "Completion length limit in tokens.")
    gen_batch_size: int = leaf(512, "Most sequences generated at once (hf: per generate() "
                               "call; vllm: max_num_seqs).")
    engine: str = leaf("auto", "Generation engine for training and evaluation: hf "
                       "(transformers generate on the trainer's module), vllm (vLLM in this "
                       "process, weights synced after every step), or auto (vllm where it is "
                       "installed and the device is a GPU, else hf).")
    hf_compile: Switch = leaf(
        "auto", "hf engine: decode on a static KV cache at fixed shapes (the rows of a call's "
        "first chunk; prompts left-padded to the call's longest, rounded up to a multiple of "
        "64 columns), each shape's cache kept across calls, the decoding step compiled once "
        "per shape on a CUDA GPU and replayed as CUDA graphs (torch.compile, "
        "reduce-overhead); plain generate on a GPU is launch-bound. auto: on for a CUDA GPU, "
        "off under FSDP2; on: everywhere but under FSDP2, where it is refused (every forward "
        "pass gathers the shards); a CPU gets the static cache without the compile, more "
        "slowly; off: the dynamic cache. The same keys give the same completions either way.")
    hf_decode: HfDecode = leaf(
        "generate", "hf engine on the static cache (hf_compile): generate, transformers' "
        "generate on the cache (its compiled forward pass, the sampler and bookkeeping run "
        "eagerly around it; the path that has run on a GPU); loop, pods's decode loop (the "
        "model's forward pass, the keyed sampler, the log-probs and the end-of-sequence "
        "bookkeeping in one compiled step: one CUDA graph replay a step, the host checking "
        "every 8 steps whether all rows have ended; opt-in until it has passed make test-gpu; "
        "a shape it fails to compile decodes with generate). The same keys give the same "
        "completions either way.")
    vllm_gpu_memory_utilization: float = leaf(0.3, "vllm engine: the fraction of GPU memory "
                                              "vLLM takes (weights + KV cache; the rest is the "
                                              "trainer's); on a CPU, vLLM reads it as the "
                                              "fraction of CPU memory it may reserve.")
    vllm_sleep: bool = leaf(False, "vllm engine on a GPU: release vLLM's memory during each "
                            "update (sleep mode) and restore it for the next generation.")
    vllm_seeded: bool = leaf(True, "vllm engine: seed each rollout's request with its key, so "
                             "a rollout does not depend on its batch, rank or a resume. vLLM "
                             "samples seeded requests one by one: about 1.6x slower decoding "
                             "on a CPU (benchmarks/generation/engines_vs_libraries.py). false: "
                             "vLLM's own generator (seeded once per engine), as fast as vLLM "
                             "itself.")


@dataclass(frozen=True)
class SelectionConfig:
    m: int = leaf(16, "Rollouts kept per prompt for the update (m == n is plain GRPO).")
    rule: str = leaf("max_variance", "Down-sampling rule; see pods.core.downsample.RULES.")
    scope: Scope = leaf("group", "group: keep m of each prompt's n (the paper); batch: keep P*m in "
                        "all, across the step's prompts, maximising the total within-group reward "
                        "variance mass (0 or 2+ per prompt; beyond the paper, needs rule "
                        "max_variance; see pods.core.batch_downsample).", "selection")
    max_kept_per_group: int | None = leaf(None, "selection batch: most rollouts one prompt may "
                                          "keep; None = n.")
    adv_scale: Scale = leaf("group", "Advantage scaling over each prompt's kept rollouts: group "
                            "std (GRPO), batch std, or none (Dr. GRPO).")
    adv_group_size: int | None = leaf(None, "Normalise advantages within blocks of this many "
                                      "of each prompt's n rollouts, in generation order (needs m "
                                      "= n: the paper's multi-GPU GRPO-GA, n = 4m in blocks of "
                                      "m); None = over each prompt's kept rollouts.")
    dynamic_sampling: bool = leaf(False, "Dynamic sampling (DAPO, arXiv 2503.14476; verl's "
                                  "filter_groups): draw more rounds of P prompts until the step "
                                  "holds P groups whose rewards vary (each rank its P/W), at most "
                                  "max_sampling_rounds rounds; groups without signal fill the rest "
                                  "when the cap is reached. See pods.train.sampling.")
    max_sampling_rounds: int = leaf(4, "dynamic_sampling: most rounds of P prompts one step draws "
                                    "(generation and scoring of each counted in its time).")


@dataclass(frozen=True)
class OptimConfig:
    lr: float = leaf(6e-4, "AdamW learning rate (the peak, under a schedule).")
    lr_schedule: Schedule = leaf("cosine", "Learning-rate schedule over the budget (max_steps or "
                                 "max_time, whichever ends first): constant, linear or cosine "
                                 "decay to lr_floor * lr (see pods.train.schedule).")
    warmup_frac: float = leaf(0.05, "Fraction of the budget over which the lr rises linearly "
                              "from 0 to lr, before the schedule's decay.")
    lr_floor: float = leaf(0.0, "The lr at the end of a linear or cosine schedule, as a "
                           "fraction of lr (the embedded default decays to 0: its last "
                           "steps then polish rather than wander; recipes tuned before "
                           "2026-11-27 set 0.1).")
    weight_decay: float = leaf(0.0, "AdamW weight decay.")
    adam_beta1: float = leaf(0.9, "AdamW beta1.")
    adam_beta2: float = leaf(0.999, "AdamW beta2 (the paper: 0.99).")
    bf16_updates: Bf16Updates = leaf(
        "exact", "How a full fine-tune with --dtype bfloat16 updates its weights. exact: "
        "AdamW on a float32 master kept as the bf16 weight plus its low 16 bits (2 bytes a "
        "parameter in the optimizer's state): the same arithmetic as float32 AdamW, no update "
        "lost (pods.train.optimizer); plain: torch's AdamW on the bf16 weights, which rounds "
        "away most updates at RL learning rates (pods warns with the share, measured on the "
        "run's weights). Float32 weights (the default) take torch's AdamW either way.")
    max_grad_norm: float = leaf(1.0, "Gradient clipping norm; 0 disables clipping.")
    micro_batch_size: int | None = leaf(None, "Sequences per forward/backward pass (gradient "
                                        "accumulation); None = on a CUDA GPU, chosen from "
                                        "its free memory (logged as optim/micro_batch_size "
                                        "and optim/micro_batch_tokens); elsewhere all P*m "
                                        "kept in one pass.")
    micro_batch_tokens: int | None = leaf(
        None, "Token positions per forward/backward pass under the packed update layouts "
        "(--update-layout packed or shared_prompt): whole groups are packed into each pass "
        "up to this budget, a group split over passes only when it alone exceeds it (its "
        "prompt then read once a pass). None: --micro-batch-size rows a pass where set, "
        "else on a CUDA GPU as many tokens as its free memory holds, elsewhere every kept "
        "rollout in one pass. With the padded layout: that many tokens of rows a pass.")
    update_layout: UpdateLayout = leaf(
        "auto", "How the update's passes lay out the kept rollouts (pods.train.layout). "
        "padded: each row left-padded to the batch's longest prompt and right-padded to its "
        "longest completion; packed: the rows of a pass as one stream of tokens, no padding; "
        "shared_prompt: packed, and the m rows kept from one prompt read it once (their "
        "completions attend to its one copy), about 2.7x fewer positions than padded at the "
        "paper's GSM8K shape. Both packed layouts are exact (the same log-probs and "
        "gradients as padded, up to float rounding), checked once against padded before a "
        "run's first update. auto: on a CPU shared_prompt wherever the model's attention "
        "allows (plain causal attention through transformers' attention interface), else "
        "padded, with the reason at start-up (sliding windows, soft-capped or sink "
        "attention); on a CUDA GPU padded until a packed layout is measured faster there "
        "(pods.train.layout.auto_layout). On CUDA the packed layouts need FlexAttention.")
    num_iterations: int = leaf(1, "Optimizer steps per generation batch; > 1 reuses the "
                               "rollouts with the clipped ratio against the old policy.")


@dataclass(frozen=True)
class LossConfig:
    clip_eps: float = leaf(0.2, "Lower (and default upper) clip range of the ratio.")
    clip_eps_high: float | None = leaf(None, "Upper clip range (DAPO clip-higher); None = "
                                       "clip_eps.")
    beta: float = leaf(0.0, "KL penalty weight to the starting policy (k3); 0 as in the paper.")
    norm: Norm = leaf("sequence", "Loss normalisation: sequence (paper), token (DAPO), constant "
                      "(Dr. GRPO).", "loss_norm")
    is_correction: Correction = leaf("none", "Importance-sampling correction of the "
                                     "engine/trainer gap (rollouts sampled by the engine, scored "
                                     "by the trainer; needs the engine's sampled log-probs: hf "
                                     "and vllm return them). Per token, ratio = exp(trainer - "
                                     "engine log-prob); sequence modes take the product over "
                                     "the sequence. token_truncate / sequence_truncate: multiply "
                                     "the policy-gradient term by min(ratio, is_cap) (TIS); "
                                     "token_mask / sequence_mask: weight by the ratio and drop "
                                     "tokens / whole sequences whose ratio is outside [1/is_cap, "
                                     "is_cap] from the loss and its normaliser (MIS, ICE-POP). "
                                     "Yao et al. 2025, 'Your efficient RL framework secretly "
                                     "brings you off-policy RL training'; TRL's "
                                     "vllm_importance_sampling_mode. none: no correction.")
    is_cap: float = leaf(2.0, "The importance-sampling correction's cap C > 1: truncate at C, "
                         "mask outside [1/C, C] (TRL's vllm_importance_sampling_cap: 2).")
