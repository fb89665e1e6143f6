"""Every shipped config and comparison spec is valid (checked without loading any model)."""

import re
from pathlib import Path

import pytest
import yaml

from pods.config import from_dict, load_yaml, read_yaml
from pods.experiments.compare import load_spec
from pods.experiments.summary import baseline_names
from runs import flat

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
SPECS = sorted(p for p in CONFIGS.rglob("*.yaml") if "compare" in p.name)
TRAIN = sorted(p for p in (CONFIGS / "paper").glob("*.yaml") if "compare" not in p.name)
SHOWCASE = sorted(p for p in CONFIGS.glob("*.yaml") if "compare" not in p.name
                  and "gpu" not in p.name)
GPU_SHOWCASE = sorted(p for p in CONFIGS.glob("*gpu*.yaml") if "compare" not in p.name)
ACCELERATE = sorted((CONFIGS / "accelerate").glob("*.yaml"))


def _named_in_docs() -> set[Path]:
    """The config files README.md and docs/ name (``{a,b}`` alternatives expanded)."""
    root, found = CONFIGS.parent, set()
    for page in [root / "README.md", *(root / "docs").rglob("*.md")]:
        for name in re.findall(r"configs/[\w./{},-]+\.(?:yaml|sh)", page.read_text()):
            names = [name]
            while any("{" in n for n in names):
                n = next(n for n in names if "{" in n)
                head, options, tail = re.match(r"(.*?)\{([^}]*)\}(.*)", n).groups()
                names.remove(n)
                names += [head + option + tail for option in options.split(",")]
            found |= {root / n for n in names}
    return found


def test_every_config_the_docs_name_is_shipped_and_every_shipped_one_is_used():
    """A documented command names files that exist; a shipped config is documented or run
    by a shipped comparison spec (no orphans)."""
    named = _named_in_docs()
    assert sorted(str(p) for p in named if not p.is_file()) == []
    in_specs = {path.parent / variant for path in SPECS
                for variant in (yaml.safe_load(path.read_text()).get("variants") or {}).values()
                if isinstance(variant, str)}
    shipped = {p for p in CONFIGS.rglob("*") if p.suffix in (".yaml", ".sh")}
    assert sorted(str(p) for p in shipped - named - in_specs) == []


@pytest.mark.parametrize("path", TRAIN, ids=lambda p: p.name)
def test_train_config_is_valid(path):
    cfg = flat(from_dict(load_yaml(path)))
    assert cfg.eval_repeats == 5 and cfg.engine == "vllm"
    # the paper: a constant lr and a training-time budget, whatever the defaults are
    assert cfg.lr_schedule == "constant" and cfg.max_steps is None and cfg.max_time > 0
    if "8gpu" in path.name:  # full fine-tuning, one prompt per GPU: the official code's
        # ratios, 128 generated per prompt; PODS keeps 32 in 4 micro-batches, GRPO-GA all
        # 128 in 16, advantages within blocks of 32 (its groups)
        assert cfg.lora_rank == 0 and cfg.prompts_per_step % 8 == 0 and cfg.n == 128
        assert cfg.m // cfg.micro_batch_size == (4 if "pods" in path.name else 16)
        assert cfg.adv_group_size == (None if "pods" in path.name else 32)
    else:
        assert cfg.lora_rank == 64 and cfg.prompts_per_step == 1
    if "pods" in path.name:
        assert cfg.n > cfg.m and cfg.rule == "max_variance"
    else:
        assert cfg.n == cfg.m


@pytest.mark.parametrize("path", SHOWCASE, ids=lambda p: p.name)
def test_cpu_showcase_config_is_valid(path):
    """The small-model runs meant for a CPU: PODS on a time budget; with vLLM's CPU build,
    in bf16 over float32 weights where the CPU computes bf16 natively (auto)."""
    cfg = flat(from_dict(load_yaml(path)))
    assert cfg.device == "cpu" and cfg.max_time > 0
    assert cfg.engine == "hf" or (cfg.engine == "vllm" and cfg.mixed_precision in ("bf16", "auto"))
    assert cfg.n > cfg.m and cfg.rule == "max_variance" and cfg.eval_size is not None


@pytest.mark.parametrize("path", GPU_SHOWCASE, ids=lambda p: p.name)
def test_gpu_showcase_config_is_valid(path):
    """The small-model runs meant for one GPU: PODS on a time budget, pods's GPU precision
    default (float32 weights, bf16 compute), the hf engine at fixed shapes (one generate
    call a round, and the evaluation's the same shape)."""
    cfg = flat(from_dict(load_yaml(path)))
    assert cfg.device == "auto" and 0 < cfg.max_time <= 300
    assert (cfg.dtype, cfg.mixed_precision, cfg.hf_compile) == ("auto", "gpu", "auto")
    assert cfg.n > cfg.m and cfg.rule == "max_variance"
    assert cfg.prompts_per_step * cfg.n == cfg.gen_batch_size == cfg.eval_size


@pytest.mark.parametrize("path", ACCELERATE, ids=lambda p: p.name)
def test_accelerate_config_is_one_pods_supports(path):
    config = read_yaml(path)[0]
    assert config["distributed_type"] in ("MULTI_GPU", "FSDP")
    assert config["mixed_precision"] == "no"  # pods sets the dtype itself
    if config["distributed_type"] == "FSDP":
        assert config["fsdp_config"]["fsdp_version"] == 2


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.name)
def test_comparison_spec_is_valid(path):
    spec = load_spec(path)
    assert set(baseline_names(spec.baseline)) <= set(spec.variants) and len(spec.seeds) >= 3
    if path.parent.name == "paper":  # the paper's experiments generate with vLLM
        assert {spec.config(name, 0).rollout.engine for name in spec.variants} == {"vllm"}


def test_every_paper_run_belongs_to_a_comparison():
    """Each paper experiment runs through one `pods compare` command."""
    named = {value for spec in SPECS for value in read_yaml(spec)[0]["variants"].values()
             if isinstance(value, str)}
    runs = {p.name for p in TRAIN if p.parent.name == "paper"}
    assert runs <= named


GPU_SETUPS = sorted((CONFIGS / "gpu").glob("*.yaml"))
PINNED = {"model", "dtype", "mixed_precision", "lora_rank", "gradient_checkpointing", "task",
          "max_prompt_tokens", "format_weight", "tag_weight", "prompts_per_step", "n", "m",
          "rule", "dynamic_sampling", "temperature", "max_new_tokens", "engine",
          "vllm_gpu_memory_utilization", "gen_batch_size", "lr", "lr_schedule", "warmup_frac",
          "weight_decay", "adam_beta1", "adam_beta2", "max_grad_norm", "micro_batch_size",
          "beta", "loss_norm", "clip_eps", "device", "max_time", "max_steps", "eval_every",
          "eval_size", "eval_repeats", "eval_temperature", "checkpoint_every", "seed"}


@pytest.mark.parametrize("path", GPU_SETUPS, ids=lambda p: p.name)
def test_gpu_setup_config_is_pinned_and_matches_its_name(path):
    """The set-ups of docs/guides/gpu.md (TASK_MODEL_Ngpu.yaml): every key that shapes the run
    written in the file (a change of pods's defaults cannot change it), the model and task
    its name says, one prompt per GPU, PODS with the micro-batch the guide's memory assumes."""
    written = set(load_yaml(path))
    assert sorted(PINNED - written) == []
    cfg = flat(from_dict(load_yaml(path)))
    name = re.fullmatch(r"(\w+)_(qwen[\d.]+-[\d.]+b)_(\d+)gpu\.yaml", path.name)
    task, model, gpus = name.groups()
    assert cfg.task == task and cfg.model.lower() == f"qwen/{model}-instruct"
    assert cfg.prompts_per_step == int(gpus) and cfg.engine == "hf"  # vLLM: not yet on a GPU
    assert cfg.n > cfg.m and cfg.rule == "max_variance" and cfg.micro_batch_size == cfg.m
    assert cfg.lora_rank == 0 and cfg.lr <= 1e-6 and cfg.gradient_checkpointing
    assert cfg.max_steps is None and cfg.max_time > 0 and cfg.eval_size is None


# Keys that do not shape how a run's steps are made: where it is written and named, what
# it reports to, when it saves, how long a collective may wait, where local data lies, how
# many sandboxes score at once, a warning, and which recipe fills keys a pinned config
# writes anyway. Every other key of TrainConfig shapes the run (the list is derived, so a
# new key is asked of every pinned config until it says where it stands).
NOT_SHAPING = {"out_dir", "run_name", "report_to", "tracker_project", "tracker_group",
               "progress", "keep_checkpoints", "checkpoint_every", "dist_timeout", "data_dir",
               "sandbox_workers", "written_for_gpu", "recipe"}
# keys that shape a run only where they apply
APPLIES = {
    "code_test_timeout": lambda c: c["task"] in CODE_TASKS,
    "code_memory_mb": lambda c: c["task"] in CODE_TASKS,
    "code_max_tests": lambda c: c["task"] in CODE_TASKS,
    "code_reward": lambda c: c["task"] in CODE_TASKS,
    "data_file": lambda c: c["task"] == "custom", "reward_fn": lambda c: c["task"] == "custom",
    "word_levels": lambda c: c["task"] == "wordproblems",
    "lora_alpha": lambda c: c["lora_rank"] > 0, "lora_dropout": lambda c: c["lora_rank"] > 0,
    "lora_target_modules": lambda c: c["lora_rank"] > 0,
    "parallelism": lambda c: c["prompts_per_step"] > 1 and "8gpu" in c["_name"],
}
CODE_TASKS = {"code", "mbpp", "humaneval"}
PINNED_CONFIGS = [CONFIGS / "smollm2_gpu.yaml", CONFIGS / "smollm2_gpu_fast.yaml",
                  *GPU_SETUPS]


def shaping_keys(values: dict, name: str) -> set[str]:
    """The keys of TrainConfig that shape a run of ``values`` (flat, resolved)."""
    from pods.config import LEAVES

    values = {**values, "_name": name}
    return {key for key in LEAVES if key not in NOT_SHAPING
            and (key not in APPLIES or APPLIES[key](values))}


@pytest.mark.parametrize("path", PINNED_CONFIGS, ids=lambda p: p.name)
def test_a_pinned_config_writes_every_key_that_shapes_its_run(path):
    """A config that says it is pinned (the GPU recipes, the GPU set-ups) writes every key
    that shapes its run, the list derived from TrainConfig: a change of pods's defaults,
    or a new key, cannot change the run it describes."""
    written = set(load_yaml(path))
    resolved = from_dict(load_yaml(path)).to_dict()
    assert sorted(shaping_keys(resolved, path.name) - written) == []


# Every shipped config resolved by the code of 2026-11-28, before models other than the
# embedded one got the language-model recipe: the field defaults once, then each config's
# (each comparison variant's, at seed 0) values that differ from them. It also holds the
# configs added beside this change on the main line (configs/gpu/, *_gpu_fast, ...),
# resolved by that code: a checkout without them skips their entries. A config changed on
# purpose since carries its new values here: on 2026-12-04 the GPU configs' engine, update
# paths and micro-batch were pinned to what had run on a GPU (docs/guides/gpu.md).
RESOLVED = Path(__file__).parent / "fixtures" / "shipped_configs.json"


def _resolved_now() -> dict[str, dict]:
    found = {}
    for path in sorted(CONFIGS.rglob("*.yaml")):
        if path.parent.name == "accelerate":
            continue
        name = str(path.relative_to(CONFIGS))
        if "compare" in path.name:
            spec = load_spec(path)
            for variant in spec.variants:
                found[f"{name}:{variant}"] = spec.config(variant, 0).to_dict()
        else:
            found[name] = from_dict(load_yaml(path)).to_dict()
    return found


def test_every_shipped_config_resolves_as_it_did():
    """The published figures stay reproducible: no shipped config (nor a comparison's
    variant) changes a value when the defaults do (configs pin what they rely on)."""
    import json

    pinned = json.loads(RESOLVED.read_text())
    defaults = pinned.pop("field defaults (2026-11-28)")
    now = _resolved_now()
    assert sorted(set(now) - set(pinned)) == []  # a new shipped config is pinned here too
    for name, values in now.items():
        expected = {**defaults, **pinned[name]}
        changed = {key: (value, values[key]) for key, value in expected.items()
                   if values[key] != value}
        assert changed == {}, f"{name} resolves differently now (was, now): {changed}"


def test_the_gpu_recipe_says_it_is_written_for_a_gpu():
    for path in GPU_SHOWCASE:
        assert from_dict(load_yaml(path)).run.written_for_gpu, path
    assert not any(from_dict(load_yaml(path)).run.written_for_gpu for path in SHOWCASE)


GUIDE = CONFIGS.parent / "docs" / "guides" / "gpu.md"
GPU_CONFIGS = sorted([*GPU_SHOWCASE, *GPU_SETUPS, *TRAIN])
PATH_KEYS = ("engine", "hf_decode", "update_layout", "weight_cast", "update_kernels")


def _guide_tables() -> tuple[dict[str, list[str]], dict[tuple[str, str], str]]:
    """From the GPU guide's "What each config pins": {config glob: [engine, hf_decode,
    update_layout, weight_cast, update_kernels, micro_batch_size]} and {(key, value): what
    ran on a GPU}."""
    text = GUIDE.read_text()
    section = text[text.index("## What each config pins"):text.index("## Launch")]
    rows, paths = {}, {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.split("|")[1:-1]]
        if line.startswith("| `configs/"):
            for pattern in re.findall(r"`(configs/[^`]+)`", cells[0]):
                rows[pattern] = cells[1:]
        elif line.startswith("| `") and len(cells) == 2:
            for pair in re.findall(r"`(\w+): (\w+)`", cells[0]):
                paths[pair] = cells[1]
    return rows, paths


def _cell(cell: str, cfg) -> int | None:
    """A micro-batch cell as the config's value: "none", a number, or "m (16; MATH 8)"."""
    word = cell.split(" ")[0]
    return int(word) if word.isdigit() else {"none": None, "m": cfg.m}[word]


def test_the_gpu_guides_table_says_what_each_gpu_config_pins():
    """docs/guides/gpu.md's table of configs against their keys: every GPU config is in it
    once, each pins (writes) the paths the table gives it, and each path is in the guide's
    list of what ran on a GPU, with a date; a path the list says is not pinned is in no
    config, and the set-ups and recipes pin only paths that ran."""
    rows, paths = _guide_tables()
    matched = {path: [p for p in rows if path in CONFIGS.parent.glob(p)] for path in GPU_CONFIGS}
    assert {str(path): len(found) for path, found in matched.items() if len(found) != 1} == {}
    for path, [pattern] in matched.items():
        written, cfg = load_yaml(path), flat(from_dict(load_yaml(path)))
        *values, micro = rows[pattern]
        assert [str(getattr(cfg, key)) for key in PATH_KEYS] == values, path.name
        assert set(PATH_KEYS) | {"micro_batch_size"} <= set(written), path.name
        assert cfg.micro_batch_size == _cell(micro, cfg), path.name
        for key in PATH_KEYS:
            status = paths[(key, str(getattr(cfg, key)))]
            assert "not pinned" not in status, (path.name, key, status)
            if path.parent.name != "paper":  # the paper's configs keep the paper's vLLM
                assert status.startswith("ran: ") and re.search(r"20\d\d-\d\d-\d\d", status), \
                    (path.name, key, status)
    assert paths[("engine", "vllm")].startswith("not yet run")
