import argparse

import pytest

from pods.config import TrainConfig, add_config_flags, config_from_args, from_dict, save_yaml


@pytest.mark.parametrize("overrides, message", [
    (dict(n=16, m=32), r"m=32 is larger than n=16.*--m 16"),
    (dict(m=0), "m=0 must be at least 1"),
    (dict(rule="max_var"), "unknown rule 'max_var'; use one of max_reward, max_variance"),
    (dict(task="gsm9k"), "unknown task 'gsm9k'; use one of"),
    (dict(max_steps=None, max_time=None), "no budget"),
    (dict(max_time=-5.0), "max_time=-5.0 must be positive"),
    (dict(max_steps=0), "max_steps=0 must be positive"),
    (dict(prompts_per_step=2, m=4, micro_batch_size=9), r"larger than .* P\*m = 2\*4 = 8"),
    (dict(loss_norm="mean"), "unknown loss_norm"),
    (dict(adv_scale="global"), "unknown adv_scale"),
    (dict(eval_every=0.0), "eval_every=0.0 must be positive"),
    (dict(lr=-1.0), "lr=-1.0 must be positive"),
    (dict(task="gsm8k"), "'tiny' only knows the arithmetic task"),
    (dict(model="x", task="custom"), "task custom needs --data-file"),
    (dict(model="x", task="custom", data_file="f.jsonl", reward_fn="mod"), "module:function"),
])
def test_invalid_values_say_what_to_change(overrides, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig(**overrides)


def test_unknown_field():
    with pytest.raises(ValueError, match="unknown config field.*n_generations"):
        from_dict({"n_generations": 4})


def test_frozen_and_replace():
    c = TrainConfig()
    with pytest.raises(AttributeError):
        c.n = 3
    assert c.replace(n=64, m=16).n == 64 and c.n == TrainConfig().n


def parse(argv):
    parser = argparse.ArgumentParser()
    parser.add_argument("--config")
    add_config_flags(parser)
    return config_from_args(parser.parse_args(argv))


def test_yaml_then_flags(tmp_path):
    path = tmp_path / "x.yaml"
    path.write_text("n: 64\nm: 16\nrule: random\nmax_time: 30\n")
    c = parse(["--config", str(path), "--m", "8", "--max-steps", "5", "--eval_size", "none"])
    assert (c.n, c.m, c.rule, c.max_time, c.max_steps, c.eval_size) == (64, 8, "random",
                                                                         30.0, 5, None)
    assert parse([]) == TrainConfig()  # no flags: defaults
    assert parse(["--progress", "false"]).progress is False


def test_saved_yaml_round_trips(tmp_path):
    c = TrainConfig(n=64, m=16, micro_batch_size=4, max_steps=3)
    save_yaml(c, tmp_path / "c.yaml")
    assert parse(["--config", str(tmp_path / "c.yaml")]) == c


def test_bad_yaml(tmp_path):
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    with pytest.raises(ValueError, match="mapping"):
        parse(["--config", str(tmp_path / "list.yaml")])
    with pytest.raises(ValueError, match="does not exist"):
        parse(["--config", str(tmp_path / "missing.yaml")])
