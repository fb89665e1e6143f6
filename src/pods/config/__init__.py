"""The training configuration: ``TrainConfig``, nested frozen dataclasses, one group per
concern (``groups``); its flat keys for YAML files, flags and run folders (``flat``,
``files``); and every check with an actionable message (``checks``). ``TrainConfig``
(``train``) is built on the groups, the flat view and the checks; none of them imports
anything of pods outside this package except ``pods.core``'s fixed choices.

    from pods.config import from_dict
    cfg = from_dict({"n": 64, "m": 16, "lr": 1e-6})   # flat keys, as in a YAML file
    cfg.rollout.n, cfg.selection.m, cfg.optim.lr       # grouped by concern
    cfg.replace(max_time=600)                          # a copy with flat keys changed
"""

from pods.config.files import (
    add_config_flags,
    config_from_args,
    flag_overrides,
    load_run_config,
    load_yaml,
    read_yaml,
    save_yaml,
)
from pods.config.groups import (
    CodeConfig,
    EvalConfig,
    MathRewardConfig,
    ModelConfig,
    RunConfig,
    TaskConfig,
    TrackingConfig,
)
from pods.config.step import LossConfig, OptimConfig, RolloutConfig, SelectionConfig
from pods.config.train import (
    LEAVES,
    TrainConfig,
    as_number,
    describe_fields,
    from_dict,
    type_problem,
)

__all__ = ["LEAVES", "CodeConfig", "EvalConfig", "LossConfig", "MathRewardConfig",
           "ModelConfig", "OptimConfig", "RolloutConfig", "RunConfig", "SelectionConfig",
           "TaskConfig", "TrackingConfig", "TrainConfig", "add_config_flags", "as_number",
           "config_from_args", "describe_fields", "flag_overrides", "from_dict",
           "load_run_config", "load_yaml", "read_yaml", "save_yaml", "type_problem"]
