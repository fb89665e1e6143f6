"""Checkpoint folders: atomic publication, the two newest kept, the fallback order, RNG
streams that resume where they were."""

import numpy as np
import pytest
import torch

from pods.runs.checkpoints import (
    complete_checkpoints,
    latest_checkpoint,
    publish_checkpoint,
    staging_dir,
    start_checkpoint,
)
from pods.train.checkpoint import restore_rng_states, rng_states, write_model, write_state


class Saved:
    """Stands in for a model and a tokenizer: ``save_pretrained`` writes one file."""

    def save_pretrained(self, path, state_dict=None):
        path.mkdir(parents=True, exist_ok=True)
        (path / "weights").write_text("w")


def write(run, step, keep=2):
    folder = start_checkpoint(run, step)
    write_model(folder, Saved(), Saved())
    write_state(folder, {"step": step})
    return publish_checkpoint(run, step, keep)


def test_checkpoints_are_published_whole_and_the_two_newest_kept(tmp_path):
    assert latest_checkpoint(tmp_path) is None and complete_checkpoints(tmp_path) == []
    paths = [write(tmp_path, step) for step in (1, 2, 3)]
    assert sorted(p.name for p in (tmp_path / "checkpoints").glob("step_*")) == \
        ["step_000002", "step_000003"]
    assert latest_checkpoint(tmp_path) == paths[-1]
    assert torch.load(paths[-1] / "state.pt") == {"step": 3}
    assert (paths[-1] / "model" / "weights").is_file()
    assert latest_checkpoint(paths[-1]) == paths[-1]  # a checkpoint folder is its own


def test_keep_one_leaves_only_the_newest_and_keep_zero_is_refused(tmp_path):
    for step in (1, 2, 3):
        write(tmp_path, step, keep=1)
    assert [p.name for p in complete_checkpoints(tmp_path)] == ["step_000003"]
    start_checkpoint(tmp_path, 4)
    with pytest.raises(ValueError, match="keep=0"):
        publish_checkpoint(tmp_path, 4, 0)
    assert latest_checkpoint(tmp_path).name == "step_000003"  # nothing lost


def test_a_staging_folder_left_by_a_kill_is_not_a_checkpoint(tmp_path):
    write(tmp_path, 1)
    start_checkpoint(tmp_path, 2)  # killed while writing step 2
    (staging_dir(tmp_path, 2) / "state.pt").write_bytes(b"half")
    assert latest_checkpoint(tmp_path).name == "step_000001"
    assert [p.name for p in complete_checkpoints(tmp_path)] == ["step_000001"]
    write(tmp_path, 3)  # the next checkpoint clears what the kill left
    assert not staging_dir(tmp_path, 2).exists()


def test_fallback_order_is_newest_first(tmp_path):
    for step in (1, 2):
        write(tmp_path, step)
    (tmp_path / "checkpoints" / "latest").write_text("step_000001")  # pointer not yet moved
    assert [p.name for p in complete_checkpoints(tmp_path)] == ["step_000001", "step_000002"]


def test_rng_states_resume_the_streams():
    prompts, select = np.random.default_rng(5), torch.Generator().manual_seed(5)
    prompts.random(), torch.rand(1, generator=select)
    saved = rng_states(prompts, select)
    expected = (prompts.random(), torch.rand(1, generator=select).item(), torch.rand(1).item())
    other_prompts, other_select = np.random.default_rng(0), torch.Generator()
    restore_rng_states(saved, other_prompts, other_select)
    assert (other_prompts.random(), torch.rand(1, generator=other_select).item(),
            torch.rand(1).item()) == expected
