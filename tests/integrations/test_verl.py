"""pods.integrations.verl on verl's own objects (runs in .venv-verl: tox -e verl): selection on
real DataProto batches against brute force, verl's GRPO advantage on the kept rows, and the
replay buffer against a real TransferQueue on a local Ray, as verl's own CPU tests run it."""

import itertools
import uuid

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.verl


def batch(scores: list[list[float]], uids: list[str] | None = None, shuffle=None):
    """A DataProto of P groups (rows of ``scores``), rewards on the last response token."""
    from verl import DataProto

    rows = [(uids[p] if uids else f"u{p}", r, p, j) for p, group in enumerate(scores)
            for j, r in enumerate(group)]
    if shuffle is not None:
        rows = [rows[i] for i in shuffle]
    token_scores = torch.zeros(len(rows), 4)
    token_scores[:, -1] = torch.tensor([r for _, r, _, _ in rows])
    return DataProto.from_dict(
        tensors={"token_level_scores": token_scores,
                 "row_id": torch.tensor([p * 100 + j for _, _, p, j in rows])},
        non_tensors={"uid": np.array([u for u, _, _, _ in rows], dtype=object)})


def best_variance(values: list[float], m: int) -> float:
    return max(np.var(c) for c in itertools.combinations(values, m))


def test_max_variance_matches_brute_force_and_keeps_groups_contiguous():
    from pods.integrations.verl import select_batch

    rng = np.random.default_rng(0)
    for _ in range(20):
        scores = rng.integers(0, 3, size=(4, 6)).astype(float).tolist()  # ties included
        metrics = {}
        kept = select_batch(batch(scores), 3, "max_variance", metrics=metrics)
        assert len(kept) == 12
        uids = list(kept.non_tensor_batch["uid"])
        assert uids == [u for u in ("u0", "u1", "u2", "u3") for _ in range(3)]  # contiguous
        ids = kept.batch["row_id"].tolist()
        for p in range(4):
            mine = ids[3 * p: 3 * p + 3]
            assert mine == sorted(mine) and all(i // 100 == p for i in mine)  # original order
            values = [scores[p][i % 100] for i in mine]
            assert np.var(values) == pytest.approx(best_variance(scores[p], 3))
        assert metrics["select/var_kept"] >= metrics["select/var_full"] - 1e-9


def test_interleaved_uids_scores_argument_and_other_rules():
    from pods.integrations.verl import select_batch

    scores = [[0.0, 1.0, 0.5, 0.2], [3.0, 1.0, 2.0, 0.0]]
    order = [4, 0, 5, 1, 6, 2, 7, 3]  # the two groups' rows interleaved
    data = batch(scores, shuffle=order)
    kept = select_batch(data, 2, "max_reward")
    assert list(kept.non_tensor_batch["uid"]) == ["u1", "u1", "u0", "u0"]  # first appearance
    assert kept.batch["row_id"].tolist() == [100, 102, 1, 2]
    external = torch.tensor([-s for s in data.batch["token_level_scores"].sum(-1).tolist()])
    flipped = select_batch(data, 2, "max_reward", scores=external)  # the lowest two now
    assert flipped.batch["row_id"].tolist() == [101, 103, 0, 3]


def test_a_group_smaller_than_m_is_refused():
    from pods.integrations.verl import select_batch

    data = batch([[1.0, 0.0, 1.0], [1.0, 0.0]], uids=["a", "b"])
    with pytest.raises(ValueError, match="uid 'b' has 2 rollouts, fewer than m=3"):
        select_batch(data, 3)


def test_verl_grpo_advantage_on_the_kept_rows_is_grpo_over_those_m():
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    from pods.integrations.verl import select_batch

    scores = [[0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 0.5], [2.0, 0.0, 1.0, 1.0, 3.0, 1.0, 0.0, 1.0]]
    kept = select_batch(batch(scores), 4)
    mask = torch.ones_like(kept.batch["token_level_scores"])
    advantages, _ = compute_grpo_outcome_advantage(
        kept.batch["token_level_scores"], mask, kept.non_tensor_batch["uid"])
    rewards = kept.batch["token_level_scores"].sum(-1).view(2, 4)  # [P, m]
    expected = (rewards - rewards.mean(1, keepdim=True)) / (rewards.std(1, keepdim=True) + 1e-6)
    assert torch.allclose(advantages[:, -1], expected.flatten(), atol=1e-6)


def test_batch_size_check():
    from pods.integrations.verl import check_batch_sizes

    check_batch_sizes(train_batch_size=64, n=16, m=4, ppo_mini_batch_size=16)  # 256 rows
    with pytest.raises(ValueError, match="leaves padding rows"):
        check_batch_sizes(train_batch_size=64, n=16, m=4, ppo_mini_batch_size=24)


# ---- the replay buffer on a real TransferQueue ---------------------------------------------

@pytest.fixture(scope="module")
def transfer_queue():
    import ray
    import transfer_queue as tq

    # TransferQueue's controller and two storage units ask Ray for a CPU each: a 2-core
    # machine needs more logical CPUs than it has, or they never get scheduled
    ray.init(num_cpus=4, include_dashboard=False)
    tq.init()
    yield tq
    tq.close()
    ray.shutdown()


def produce(tq, partition: str, groups: dict[str, list[float]],
            lengths: dict[str, list[int]] | None = None, drop: tuple[str, ...] = ()) -> None:
    """Trajectories with their rewards, then each prompt marked finished (as the agent loop
    does): key ``{uid}_{session}_0``, reward on the last token of ``rm_scores``, a
    ``response_mask`` of ``lengths[uid][session]`` ones (default 3) of 4; the fields named in
    ``drop`` left out (no rm_scores: as when a colocated reward model scores after sampling)."""
    for uid, rewards in groups.items():
        for session, reward in enumerate(rewards):
            rm_scores = torch.zeros(3)
            rm_scores[-1] = reward
            length = (lengths or {}).get(uid, [3] * len(rewards))[session]
            mask = (torch.arange(4) < length).long()
            fields = {"input_ids": torch.tensor([1, 2, 3]), "rm_scores": rm_scores,
                      "response_mask": mask}
            for name in drop:
                del fields[name]
            tq.kv_put(key=f"{uid}_{session}_0", partition_id=partition, fields=fields,
                      tag={"is_prompt": False, "seq_len": 3, "global_steps": 0})
        tq.kv_put(key=uid, partition_id=partition,
                  tag={"is_prompt": True, "status": "finished", "global_steps": 0})


def buffer(refill_fn=None, **sampler_kwargs):
    from pods.integrations.verl import PODSReplayBuffer

    return PODSReplayBuffer(trainer_mode="sync", trainer_config={}, max_off_policy_threshold=8,
                            max_off_policy_strategy="drop", sampler_kwargs=sampler_kwargs,
                            poll_interval=0.05, refill_fn=refill_fn)


def test_replay_buffer_keeps_m_per_group_and_clears_the_rest(transfer_queue):
    tq, partition = transfer_queue, f"train-{uuid.uuid4().hex}"
    groups = {uuid.uuid4().hex: [0.0, 1.0, 0.0, 0.0, 1.0, 0.5],
              uuid.uuid4().hex: [1.0, 1.0, 1.0, 0.0, 1.0, 1.0]}
    produce(tq, partition, groups)
    meta, metrics = buffer(pods_m=4).sample(global_steps=0, partition_id=partition,
                                            batch_size=2)
    assert len(meta.keys) == 8 and meta.partition_id == partition
    for uid, rewards in groups.items():
        mine = [k for k in meta.keys if k.startswith(uid)]
        values = [rewards[int(k.split("_")[1])] for k in mine]
        assert np.var(values) == pytest.approx(best_variance(rewards, 4))
    assert {"select/var_full", "select/var_kept", "select/zero_var_frac"} <= set(metrics)
    kept = tq.kv_batch_get(keys=meta.keys, partition_id=partition, select_fields=["rm_scores"])
    assert len(kept["rm_scores"]) == 8  # the kept trajectories are still there
    stored = set(tq.kv_list(partition_id=partition).get(partition, {}))
    dropped = {f"{u}_{s}_0" for u in groups for s in range(6)} - set(meta.keys)
    assert set(meta.keys) <= stored  # the kept ones are listed,
    assert len(dropped) == 4 and not dropped & stored  # the dropped ones are cleared


def test_trajectories_without_rewards_say_how_to_configure_verl(transfer_queue):
    """A colocated reward model (reward.reward_model.enable=True without its own resource
    pool) scores only after the buffer has sampled: the buffer finds no rm_scores and says
    which setting stores them with each trajectory, instead of tensordict's KeyError."""
    tq, partition = transfer_queue, f"train-{uuid.uuid4().hex}"
    uid = uuid.uuid4().hex
    produce(tq, partition, {uid: [0.0, 1.0, 0.0, 1.0]}, drop=("rm_scores",))
    with pytest.raises(ValueError) as error:
        buffer(pods_m=2).sample(global_steps=0, partition_id=partition, batch_size=1)
    message = str(error.value)
    assert f"partition {partition!r}" in message and "without 'rm_scores'" in message
    assert "reward.reward_model.enable_resource_pool=True" in message
    assert "reward.reward_model.enable=False" in message
    stored = set(tq.kv_list(partition_id=partition).get(partition, {}))
    assert {f"{uid}_{s}_0" for s in range(4)} <= stored  # nothing was dropped


def test_a_length_rule_without_response_masks_says_so(transfer_queue):
    tq, partition = transfer_queue, f"train-{uuid.uuid4().hex}"
    produce(tq, partition, {uuid.uuid4().hex: [1.0, 0.0, 1.0, 0.0]}, drop=("response_mask",))
    with pytest.raises(ValueError, match="pods_rule 'shortest' reads each trajectory's "
                                         "response_mask"):
        buffer(pods_m=2, pods_rule="shortest").sample(global_steps=0, partition_id=partition,
                                                       batch_size=1)


def test_replay_buffer_needs_m_and_a_known_rule():
    with pytest.raises(ValueError, match="needs trainer.v1.sampler.sampler_kwargs.pods_m"):
        buffer()
    with pytest.raises(ValueError, match="unknown pods_rule 'best'; use one of"):
        buffer(pods_m=2, pods_rule="best")
    with pytest.raises(ValueError, match="leaves padding rows"):
        buffer(pods_m=4, pods_train_batch_size=64, pods_n=16, pods_ppo_mini_batch_size=24)


def test_untested_verl_versions_get_a_warning(monkeypatch):
    import verl

    from pods.integrations.verl import check_verl_version

    monkeypatch.setattr(verl, "__version__", "0.10.2", raising=False)
    with pytest.warns(UserWarning, match="tested with verl 0.9.x; verl 0.10.2 is installed"):
        check_verl_version()
    monkeypatch.setattr(verl, "__version__", "0.9.4", raising=False)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_verl_version()


def test_replay_buffer_composes_with_dapo_group_filter(transfer_queue):
    """DAPO (filter_groups_metric=reward) evicts the group without reward variance, then
    PODS keeps m of each remaining group."""
    tq, partition = transfer_queue, f"train-{uuid.uuid4().hex}"
    flat, rich, other = uuid.uuid4().hex, uuid.uuid4().hex, uuid.uuid4().hex
    groups = {flat: [1.0] * 4, rich: [0.0, 1.0, 0.0, 1.0], other: [0.0, 0.0, 0.0, 1.0]}
    produce(tq, partition, groups)
    refills = []  # the trainer's refill_fn; enough groups remain, so it is not needed
    rb = buffer(refills.append, pods_m=2, filter_groups_metric="reward", train_batch_size=2,
                gen_batch_size=1, max_inflight_gen_batches=1)
    meta, metrics = rb.sample(global_steps=0, partition_id=partition, batch_size=2)
    assert sorted({k.split("_")[0] for k in meta.keys}) == sorted([rich, other])
    assert len(meta.keys) == 4 and metrics["select/zero_var_frac"] == 0.0
    stored = set(tq.kv_list(partition_id=partition).get(partition, {}))
    assert not any(k.startswith(flat) for k in stored)  # DAPO's eviction cleared it


def test_length_rules_read_the_response_mask():
    from pods.integrations.verl import select_batch

    data = batch([[1.0, 1.0, 1.0, 1.0]])
    lengths = torch.tensor([4, 1, 3, 2])
    data.batch["response_mask"] = (torch.arange(4) < lengths.unsqueeze(1)).long()  # [4, 4]
    assert select_batch(data, 2, "shortest").batch["row_id"].tolist() == [1, 3]
    with pytest.raises(ValueError, match="rule 'shortest' reads each rollout's response_mask, "
                       "which this batch does not hold"):
        select_batch(batch([[1.0, 0.0, 1.0]]), 2, "shortest")


def test_a_rule_with_a_new_input_gets_it_from_the_fields_it_reads(monkeypatch):
    """A per-rollout input defined once in pods.core.rollout_inputs reaches a verl batch:
    here one that reads the completions' token ids (verl's ``responses``)."""
    from pods.core.rollout_inputs import ROLLOUT_INPUTS
    from pods.integrations.verl import select_batch

    def first_token(completion_ids):
        return completion_ids[:, 0]  # [rows]

    def by_first_token(rewards, m, generator, *, first_token):
        return first_token.topk(m, dim=1).indices

    by_first_token.needs = ("first_token",)
    monkeypatch.setitem(ROLLOUT_INPUTS, "first_token", first_token)
    data = batch([[1.0, 1.0, 1.0, 1.0]])
    data.batch["responses"] = torch.tensor([[3, 0], [9, 0], [1, 0], [7, 0]])
    assert select_batch(data, 2, by_first_token).batch["row_id"].tolist() == [1, 3]


def test_replay_buffer_length_rules_read_each_trajectorys_response_mask(transfer_queue):
    tq, partition = transfer_queue, f"train-{uuid.uuid4().hex}"
    uid = uuid.uuid4().hex
    produce(tq, partition, {uid: [1.0, 0.0, 1.0, 0.0]}, lengths={uid: [4, 1, 3, 2]})
    meta, metrics = buffer(pods_m=2, pods_rule="shortest").sample(
        global_steps=0, partition_id=partition, batch_size=1)
    assert sorted(meta.keys) == [f"{uid}_1_0", f"{uid}_3_0"]  # lengths 1 and 2
    assert metrics["select/completion_len"] == 1.5


def test_replay_buffer_keeps_a_short_group_whole(transfer_queue):
    """A group holding fewer than m trajectories (failed rollouts left out) is kept whole
    and counted, instead of stopping the run mid-training."""
    tq, partition = transfer_queue, f"train-{uuid.uuid4().hex}"
    full, short = uuid.uuid4().hex, uuid.uuid4().hex
    produce(tq, partition, {full: [0.0, 1.0, 0.0, 1.0], short: [1.0, 0.0]})
    meta, metrics = buffer(pods_m=3).sample(global_steps=0, partition_id=partition,
                                            batch_size=2)
    assert sum(k.startswith(full) for k in meta.keys) == 3
    assert sorted(k for k in meta.keys if k.startswith(short)) == [f"{short}_0_0",
                                                                  f"{short}_1_0"]
    assert metrics["select/short_groups"] == 1 and metrics["select/kept"] == 5


def test_verl_loads_the_buffer_from_its_config_path():
    """What verl's trainer does with trainer.v1.sampler.custom_sampler.{path,name}."""
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer
    from verl.utils.import_utils import load_extern_type

    # (deprecated in verl, but what 0.9.1's trainer_base._build_replay_buffer calls)
    cls = load_extern_type("pkg://pods.integrations.verl", "PODSReplayBuffer")
    assert issubclass(cls, ReplayBuffer) and cls.__name__ == "PODSReplayBuffer"


def test_select_batch_warns_on_an_untested_verl(monkeypatch):
    import verl

    import pods.integrations.verl.select as adapter

    monkeypatch.setattr(verl, "__version__", "0.11.0", raising=False)
    monkeypatch.setattr(adapter, "_checked", [])
    with pytest.warns(UserWarning, match="verl 0.11.0 is installed"):
        adapter.select_batch(batch([[0.0, 1.0]]), 1)
