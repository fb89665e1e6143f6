import argparse

import pytest

from pods.config import TrainConfig, add_config_flags, config_from_args, from_dict, save_yaml
from runs import flat


@pytest.mark.parametrize("overrides, message", [
    (dict(n=16, m=32), r"m=32 is larger than n=16.*--m 16"),
    (dict(selection="prompt"), "unknown selection 'prompt'; use one of group, batch"),
    (dict(code_test_timeout=0.0), "code_test_timeout must be positive"),
    (dict(code_memory_mb=16), "code_memory_mb at least 32"),
    (dict(code_max_tests=0), r"code_max_tests=0 must be at least 1 \(or None\)"),
    (dict(sandbox_workers=0), r"sandbox_workers=0 must be at least 1"),
    (dict(code_reward="some"), "unknown code_reward 'some'; use one of fraction, all"),
    (dict(reward_errors="skip"), "unknown reward_errors 'skip'; use one of raise, zero"),
    (dict(lr_schedule="step"), "unknown lr_schedule 'step'; use one of constant, linear, cosine"),
    (dict(parallelism="zero3"), "unknown parallelism 'zero3'; use one of ddp, fsdp2"),
    (dict(dtype="fp8"), "unknown dtype 'fp8'; use one of auto, float32, bfloat16, float16"),
    (dict(mixed_precision="fp16"),
     "unknown mixed_precision 'fp16'; use one of gpu, no, bf16, auto"),
    (dict(loss_norm=3), "unknown loss_norm 3; use one of sequence, token, constant"),
    (dict(selection="batch", rule="random"), "selection batch chooses max-variance subsets "
                                             "of any size, not rule 'random'"),
    (dict(max_kept_per_group=8), "max_kept_per_group=8 needs selection batch"),
    (dict(selection="batch", n=16, max_kept_per_group=17), "from 2 to n=16"),
    (dict(m=0), "m=0 must be at least 1"),
    (dict(eval_offset=-1), r"eval_offset=-1 must be >= 0"),
    (dict(keep_checkpoints=0), r"keep_checkpoints=0 must be >= 1"),
    (dict(n=8, m=4, adv_group_size=2), r"adv_group_size=2 .* needs m = n \(got m=4, n=8\)"),
    (dict(n=8, m=8, adv_group_size=3), "n a multiple of it"),
    (dict(max_steps=None, max_time=None), "no budget"),
    (dict(max_time=-5.0), "max_time=-5.0 must be positive"),
    (dict(max_steps=0), "max_steps=0 must be positive"),
    (dict(prompts_per_step=2, m=4, micro_batch_size=9), r"larger than .* P\*m = 2\*4 = 8"),
    (dict(micro_batch_size=4, micro_batch_tokens=64), r"both cut the update.s passes: keep one"),
    (dict(loss_norm="mean"), "unknown loss_norm"),
    (dict(adv_scale="global"), "unknown adv_scale"),
    (dict(is_correction="tis"), "unknown is_correction 'tis'; use one of none, "
                                "token_truncate, token_mask, sequence_truncate, sequence_mask"),
    (dict(is_cap=1.0), r"is_cap=1.0 must be > 1: ratios are truncated at is_cap"),
    (dict(eval_every=0.0), "eval_every=0.0 must be positive"),
    (dict(lr=-1.0), "lr=-1.0 must be positive"),
    (dict(truncated_reward=float("nan")), r"truncated_reward=nan must be a finite number"),
    (dict(model="x", task="custom"), "task custom needs --data-file"),
    (dict(model="x", task="custom", data_file="f.jsonl", reward_fn="mod"), "module:function"),
])
def test_invalid_values_say_what_to_change(overrides, message):
    with pytest.raises(ValueError, match=message):
        from_dict(overrides)


@pytest.mark.parametrize("overrides, message", [
    (dict(rule="max_var"),
     "unknown rule 'max_var'; use one of max_abs_advantage, max_reward, max_variance"),
    (dict(task="gsm9k"), "unknown task 'gsm9k'; use one of amc23, arithmetic"),
    (dict(task="gsm8k"), "'tiny' only knows the arithmetic task"),
    (dict(model="x", task="wordproblems", word_levels="1,9"), "level"),
    (dict(engine="sglang"), "unknown engine 'sglang'; use one of auto, hf, vllm"),
    (dict(report_to="wandb,neptune"), "unknown tracker 'neptune' in report_to"),
])
def test_registry_names_are_checked_by_their_components(overrides, message, tmp_path):
    """The names an open registry holds (rules, tasks, engines, trackers) are checked by
    the component that owns it, before anything loads: by train() and by pods compare."""
    from pods.experiments.compare import CompareSpec
    from pods.train.checks import check
    from pods.train.run import train

    config = from_dict(overrides)  # config itself does not know the registries
    with pytest.raises(ValueError, match=f"invalid config: .*{message}"):
        check(config)
    with pytest.raises(ValueError, match=message):
        train(config.replace(out_dir=str(tmp_path), run_name="r"))
    assert not (tmp_path / "r").exists()
    with pytest.raises(ValueError, match=f"variant 'v' \\(seed 0\\): .*{message}"):
        CompareSpec(variants={"v": overrides}, seeds=[0], baseline="v")
    assert check(from_dict({})) == from_dict({})


def test_a_rule_needing_an_input_pods_does_not_compute_is_refused_before_loading(
        monkeypatch, tmp_path):
    from pods.core.downsample import RULES
    from pods.train.checks import check
    from pods.train.run import train

    def odd(rewards, m, generator, *, colour):
        return rewards.topk(m, dim=1).indices

    odd.needs = ("colour",)
    monkeypatch.setitem(RULES, "odd", odd)
    config = from_dict({"rule": "odd"})
    message = "rule 'odd' needs 'colour', which is not a per-rollout input"
    with pytest.raises(ValueError, match=f"invalid config: {message}"):
        check(config)
    with pytest.raises(ValueError, match=message):
        train(config.replace(out_dir=str(tmp_path), run_name="r"))
    assert not (tmp_path / "r").exists()


def test_unknown_field():
    with pytest.raises(ValueError, match="unknown config field.*n_generations"):
        from_dict({"n_generations": 4})


def test_frozen_and_replace():
    c = TrainConfig()
    with pytest.raises(AttributeError):
        c.rollout.n = 3
    assert c.replace(n=64, m=16).rollout.n == 64 and c.rollout.n == TrainConfig().rollout.n


def parse(argv):
    parser = argparse.ArgumentParser()
    parser.add_argument("--config")
    add_config_flags(parser)
    return config_from_args(parser.parse_args(argv))


def test_yaml_then_flags(tmp_path):
    path = tmp_path / "x.yaml"
    path.write_text("n: 64\nm: 16\nrule: random\nmax_time: 30\n")
    c = flat(parse(["--config", str(path), "--m", "8", "--max-steps", "5", "--eval_size",
                    "none"]))
    assert (c.n, c.m, c.rule, c.max_time, c.max_steps, c.eval_size) == (64, 8, "random",
                                                                         30.0, 5, None)
    assert parse([]) == TrainConfig()  # no flags: defaults
    assert parse(["--progress", "false"]).run.progress is False


def test_saved_yaml_round_trips(tmp_path):
    c = from_dict(dict(n=64, m=16, micro_batch_size=4, max_steps=3))
    save_yaml(c, tmp_path / "c.yaml")
    assert parse(["--config", str(tmp_path / "c.yaml")]) == c


def test_bad_yaml(tmp_path):
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    with pytest.raises(ValueError, match="mapping"):
        parse(["--config", str(tmp_path / "list.yaml")])
    with pytest.raises(ValueError, match="does not exist"):
        parse(["--config", str(tmp_path / "missing.yaml")])


def _config_file(tmp_path, text):
    path = tmp_path / "run.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("text, message", [
    ("n: 64\nm 16\nrule: max_variance\n", r"run.yaml, line 2, column 1: YAML syntax error"),
    ("n: [64\n", r"run.yaml, line 1, column 4: YAML syntax error"),
    ("n: 64\nm: sixteen\n", r"run.yaml, line 2: m='sixteen' must be a whole number\.$"),
    ("lr: fast\n", r"line 1: lr='fast' must be a number\.$"),
    ("max_steps: yes\n", r"line 1: max_steps=True must be a whole number \(or null\)"),
    ("progress: 3\n", r"line 1: progress=3 must be true or false"),
    ("gradient_checkpointing: 1\n",
     r"line 1: unknown gradient_checkpointing 1; use one of false, true, auto\.$"),
    ("n: 64\nloss_norm: mean\n",
     r"line 2: unknown loss_norm 'mean'; use one of sequence, token, constant\.$"),
    ("n: 64\nrules: random\n", r"line 2: unknown field 'rules'; did you mean 'rule'\?"),
])
def test_config_file_errors_name_the_file_and_line(tmp_path, text, message):
    from pods.config import load_yaml

    with pytest.raises(ValueError, match=message):
        load_yaml(_config_file(tmp_path, text))


def test_yaml_numbers_without_a_dot_are_numbers(tmp_path):
    from pods.config import load_yaml

    values = load_yaml(_config_file(tmp_path, "lr: 3e-4\nmax_time: 90\n"))
    assert values == {"lr": 3e-4, "max_time": 90} and from_dict(values).optim.lr == 3e-4


@pytest.mark.parametrize("fields, message", [
    (dict(n="64"), r"n='64' must be a whole number"),
    (dict(lr=None), r"lr must be a number, not empty"),
    (dict(max_steps=2.5), r"max_steps=2.5 must be a whole number \(or null\)"),
])
def test_wrong_types_from_python_are_refused(fields, message):
    with pytest.raises(ValueError, match=message):
        from_dict(fields)


def test_pods_train_with_a_broken_config_prints_one_line(tmp_path):
    import subprocess
    import sys

    path = _config_file(tmp_path, "n: 64\nm 16\n")
    done = subprocess.run([sys.executable, "-m", "pods", "train", "--config", str(path)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{path}, line 2" in lines[0] and "YAML syntax error" in lines[0]


def test_groups_hold_every_field_once_with_help_and_a_unique_flat_key():
    import dataclasses
    import typing

    from pods.config import LEAVES, describe_fields

    rows = describe_fields()
    def leaves(cls) -> list[str]:  # every dataclass field that is not itself a group
        types = typing.get_type_hints(cls)
        return [name for f in dataclasses.fields(cls) for name in
                (leaves(types[f.name]) if dataclasses.is_dataclass(types[f.name])
                 else [f.name])]

    assert len(rows) == len(LEAVES) == len({r["key"] for r in rows}) == len(leaves(TrainConfig))
    assert all(r["help"] and r["group"] for r in rows)  # every leaf sits in a group
    groups = [f.name for f in dataclasses.fields(TrainConfig)]
    assert groups == ["model", "task", "rollout", "selection", "optim", "loss", "eval", "run",
                      "tracking"]
    where = {r["key"]: r["group"] for r in rows}
    assert (where["n"], where["m"], where["lr"], where["code_test_timeout"],
            where["correctness_weight"], where["eval_size"]) == (
        "rollout", "selection", "optim", "task.code", "task.math", "eval")


def test_components_take_their_group():
    c = from_dict({"n": 32, "m": 8, "lr": 1e-3, "code_test_timeout": 3.0, "model": "tiny"})
    assert (c.rollout.n, c.selection.m, c.optim.lr, c.task.code.test_timeout) == (32, 8, 1e-3,
                                                                                 3.0)
    assert c.model.name == "tiny" and c.kept_per_step == 8 * 8


def test_help_shows_one_group_per_concern(capsys):
    from pods.cli import main

    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = capsys.readouterr().out
    for group in ("model", "task", "rollout", "selection", "optim", "loss", "eval", "run",
                  "tracking"):
        assert f"\n{group}:\n" in out, group
    assert out.index("\nrollout:\n") < out.index("  --n INT") < out.index("\nselection:\n") \
        < out.index("  --m INT") < out.index("\noptim:\n") < out.index("  --lr FLOAT")


def test_fixed_choices_are_written_once_as_literal_types():
    """Each field of fixed choices is typed with a Literal; the tuples the components import
    are that type's arguments, and the flat view reads its choices from it."""
    import typing

    from pods.config import LEAVES, fields
    from pods.core.advantages import SCALES
    from pods.core.correction import CORRECTIONS
    from pods.core.loss import NORMS
    from pods.core.selection import SCOPES

    tuples = {"dtype": fields.DTYPES, "mixed_precision": fields.MIXED_PRECISIONS,
              "parallelism": fields.PARALLELISMS, "lr_schedule": fields.SCHEDULES,
              "selection": SCOPES, "reward_errors": fields.REWARD_ERRORS,
              "code_reward": fields.CODE_REWARDS, "loss_norm": NORMS, "adv_scale": SCALES,
              "is_correction": CORRECTIONS, "bf16_updates": fields.BF16_UPDATES,
              "hf_compile": fields.SWITCHES, "hf_decode": fields.HF_DECODES,
              "weight_cast": fields.WEIGHT_CASTS, "update_kernels": fields.UPDATE_KERNELS,
              "recipe": fields.RECIPES, "update_layout": fields.UPDATE_LAYOUTS}
    for key, names in tuples.items():
        assert typing.get_origin(LEAVES[key].hint) is typing.Literal, key
        assert LEAVES[key].choices == names and LEAVES[key].kind == "str", key
    checkpointing = LEAVES["gradient_checkpointing"]  # true, false or auto: bool's words
    assert checkpointing.choices == fields.CHECKPOINTINGS == (False, True, "auto")
    assert checkpointing.kind == "bool" and checkpointing.type == "False | True | 'auto'"
    assert {k for k, leaf in LEAVES.items() if leaf.choices} == {*tuples, checkpointing.key}
    assert LEAVES["loss_norm"].type == "'sequence' | 'token' | 'constant'"
    assert LEAVES["max_steps"].type == "int | None" and LEAVES["max_steps"].choices is None


def test_flags_of_fixed_choices_take_only_those(capsys):
    """--help shows a field's choices; argparse refuses any other value, naming them."""
    assert parse(["--loss-norm", "token", "--selection", "batch"]).loss.norm == "token"
    with pytest.raises(SystemExit):
        parse(["--loss-norm", "mean"])
    err = capsys.readouterr().err
    assert "--loss-norm" in err and "invalid choice: 'mean'" in err and "constant" in err
    parser = argparse.ArgumentParser()
    add_config_flags(parser)
    assert "--loss-norm {sequence,token,constant}" in parser.format_help()


def test_a_flag_of_true_false_or_a_word_takes_each(tmp_path, capsys):
    """--gradient-checkpointing takes true and false as every bool flag does, or auto;
    YAML's true and auto alike."""
    for text, value in (("true", True), ("off", False), ("auto", "auto")):
        assert parse(["--gradient-checkpointing", text]).model.gradient_checkpointing == value
    with pytest.raises(SystemExit):
        parse(["--gradient-checkpointing", "sometimes"])
    assert "invalid choice: 'sometimes'" in capsys.readouterr().err
    parser = argparse.ArgumentParser()
    add_config_flags(parser)
    assert "--gradient-checkpointing {false,true,auto}" in parser.format_help()
    for text, value in (("true", True), ("auto", "auto")):
        path = _config_file(tmp_path, f"gradient_checkpointing: {text}\n")
        assert parse(["--config", str(path)]).model.gradient_checkpointing == value


def test_a_time_budget_alone_is_the_whole_budget(tmp_path):
    """The default budget is 1000 steps; a config that names only max_time means that."""
    assert (TrainConfig().run.max_steps, TrainConfig().run.max_time) == (1000, None)
    timed = from_dict({"max_time": 3600})
    assert (timed.run.max_steps, timed.run.max_time) == (None, 3600)
    both = from_dict({"max_time": 60, "max_steps": 10})
    assert (both.run.max_steps, both.run.max_time) == (10, 60)
    path = tmp_path / "t.yaml"
    path.write_text("max_time: 30\n")
    assert parse(["--config", str(path)]).run.max_steps is None
    assert parse(["--max-time", "30", "--max-steps", "5"]).run.max_steps == 5
