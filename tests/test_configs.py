"""Every shipped config and comparison spec is valid (checked without loading any model)."""

from pathlib import Path

import pytest

from pods.compare import load_spec
from pods.config import from_dict, load_yaml

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
SPECS = sorted(p for p in CONFIGS.rglob("*.yaml") if "compare" in p.name)
TRAIN = sorted(p for p in CONFIGS.rglob("*.yaml") if "compare" not in p.name)


def test_configs_are_shipped():
    assert len(TRAIN) >= 6 and len(SPECS) >= 3


@pytest.mark.parametrize("path", TRAIN, ids=lambda p: p.name)
def test_train_config_is_valid(path):
    cfg = from_dict(load_yaml(path))
    assert cfg.lora_rank == 64 and cfg.prompts_per_step == 1 and cfg.eval_repeats == 5
    if "pods" in path.name:
        assert cfg.n > cfg.m and cfg.rule == "max_variance"
    else:
        assert cfg.n == cfg.m


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.name)
def test_comparison_spec_is_valid(path):
    spec = load_spec(path)
    assert spec.baseline in spec.variants and len(spec.seeds) >= 3
