"""The verl command lines in the README and the verl guide agree with the recipe that the
project runs (configs/verl/gsm8k_grpo_vs_pods.sh): a user who copies one gets PODS."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "configs" / "verl" / "gsm8k_grpo_vs_pods.sh"
# without these verl runs its classic trainer and never calls the replay buffer
NEEDED = ("trainer.use_v1", "trainer.v1.trainer_mode", "trainer.v1.sampler.custom_sampler.path",
          "trainer.v1.sampler.custom_sampler.name", "trainer.v1.sampler.sampler_kwargs.pods_m")


def overrides(text: str) -> dict[str, str]:
    """Hydra overrides key=value (a leading + dropped) in a command line or script."""
    return {m[1]: m[2] for m in re.finditer(r"\+?([a-z_][\w.]*\.[\w.]+)=(\S+)", text)}


def commands(page: Path) -> list[str]:
    blocks = re.findall(r"```bash\n(.*?)```", page.read_text(), re.S)
    return [b for b in blocks if "verl.trainer.main_ppo" in b]


def test_documented_verl_commands_match_the_recipe():
    recipe = overrides(RECIPE.read_text())
    pages = [ROOT / "README.md", ROOT / "docs" / "guides" / "verl.md"]
    found = [(page, block) for page in pages for block in commands(page)]
    assert len(found) >= 2, "the README and the verl guide each show the verl command"
    for page, block in found:
        documented = overrides(block)
        for key in NEEDED:
            assert key in documented, f"{page.name}: the verl command lacks {key}"
        for key, value in documented.items():
            assert key in recipe, f"{page.name}: {key} is not set by {RECIPE.name}"
            if "$" not in recipe[key] and key != "actor_rollout_ref.rollout.n":
                assert value == recipe[key], f"{page.name}: {key}={value}, recipe {recipe[key]}"
