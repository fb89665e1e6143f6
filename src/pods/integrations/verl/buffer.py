"""``PODSReplayBuffer``: verl's V1 replay buffer with PODS selection on the training partition
(see ``pods.integrations.verl``, which exports it; verl's config names it there:
``trainer.v1.sampler.custom_sampler.path=pkg://pods.integrations.verl``)."""

from __future__ import annotations

import torch
from torch.nn.utils.rnn import pad_sequence

from pods.core.downsample import check_rule
from pods.core.selection import SelectionSpec
from pods.integrations.verl.select import (
    RowBatch,
    check_batch_sizes,
    check_verl_version,
    rule_fields,
    select_rows,
    verl_inputs,
)


def _replay_buffer_base():
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer

    return ReplayBuffer


class PODSReplayBuffer(_replay_buffer_base()):
    """verl's synchronous V1 replay buffer, keeping ``pods_m`` of each group's rollouts on
    the training partition (see the module docstring). ``sampler_kwargs``: ``pods_m``
    (required), ``pods_rule`` (default max_variance; a rule that reads more than
    rewards, such as the length rules, reads the trajectory fields its inputs need:
    ``response_mask``, ``responses``), ``pods_seed`` (the random rule's stream). A group
    that holds fewer than m trajectories (failed rollouts that verl keeps out of it) is
    kept whole and counted in ``select/short_groups``. DAPO's group filter composes
    through ``filter_groups_metric``, ``train_batch_size``, ``gen_batch_size`` and
    ``max_inflight_gen_batches``, which verl passes only to its built-in buffer: the
    groups DAPO keeps are then down-sampled. With ``pods_train_batch_size``, ``pods_n``,
    ``pods_ppo_mini_batch_size`` (and ``pods_world_size``) given, sizes that would leave
    padding rows are refused at start."""

    DAPO_KEYS = ("filter_groups_metric", "train_batch_size", "gen_batch_size",
                 "max_inflight_gen_batches", "sync_refill_failed_groups")

    def __init__(self, *args, sampler_kwargs=None, **kwargs):
        options = dict(sampler_kwargs or {})
        if "pods_m" not in options:
            raise ValueError("PODSReplayBuffer needs trainer.v1.sampler.sampler_kwargs.pods_m, "
                             "the rollouts kept per prompt (m <= actor_rollout_ref.rollout.n).")
        for key in self.DAPO_KEYS:
            if options.get(key) is not None:
                kwargs.setdefault(key, options[key])
        super().__init__(*args, sampler_kwargs=sampler_kwargs, **kwargs)
        self.pods_m, self.pods_rule = int(options["pods_m"]), options.get("pods_rule",
                                                                          "max_variance")
        check_rule(self.pods_rule, "pods_rule", callables=False)  # a name, from verl's config
        self.pods_spec = SelectionSpec(m=self.pods_m, rule=self.pods_rule)
        self.rule_fields = rule_fields(self.pods_rule)  # what the rule's inputs read
        self.pods_generator = torch.Generator().manual_seed(int(options.get("pods_seed", 0)))
        sizes = [options.get(k) for k in ("pods_train_batch_size", "pods_n",
                                         "pods_ppo_mini_batch_size")]
        if all(v is not None for v in sizes):  # refuse padding rows before training starts
            train_batch_size, n, mini = (int(v) for v in sizes)
            check_batch_sizes(train_batch_size, n, self.pods_m, mini,
                              int(options.get("pods_world_size", 1)))
        check_verl_version()

    def sample(self, global_steps: int, partition_id: str, batch_size: int):
        meta, metrics = super().sample(global_steps, partition_id, batch_size)
        if partition_id == "val" or not meta.keys:
            return meta, metrics
        import transfer_queue as tq
        from transfer_queue import KVBatchMeta

        fields = ["rm_scores", *self.rule_fields]
        data = tq.kv_batch_get(keys=list(meta.keys), partition_id=partition_id,
                               select_fields=fields)
        _check_fields(data, fields, meta, partition_id, self.pods_rule)
        scores = torch.stack([torch.as_tensor(v).float().sum() for v in data["rm_scores"]])
        padded = {name: pad_sequence([torch.as_tensor(v) for v in data[name]], batch_first=True)
                  for name in self.rule_fields}  # [rows, T] each, zeros after each row's end
        inputs = verl_inputs(self.pods_rule, padded)  # [rows] each
        mask = padded.get("response_mask")  # fetched when the rule reads it
        uids = [key.split("_")[0] for key in meta.keys]
        batch = RowBatch(uids, scores, inputs, None if mask is None else mask.sum(-1))
        rows, stats = select_rows(batch, self.pods_spec, self.pods_generator, short="keep")
        kept = set(rows.tolist())
        dropped = [key for i, key in enumerate(meta.keys) if i not in kept]
        if dropped:  # out of storage: nothing downstream reads them
            tq.kv_clear(keys=dropped, partition_id=partition_id)
        chosen = rows.tolist()
        kept_meta = KVBatchMeta(keys=[meta.keys[i] for i in chosen],
                                tags=[meta.tags[i] for i in chosen],
                                partition_id=meta.partition_id, fields=meta.fields,
                                extra_info=meta.extra_info)
        return kept_meta, {**metrics, **stats}


NO_REWARDS = (
    "PODSReplayBuffer selects each group's rollouts by their rewards, but the trajectories "
    "in partition {partition!r} were stored without 'rm_scores'{stored}. "
    "verl stores the reward with each trajectory only when it is computed while the "
    "rollouts are generated: a rule-based reward (reward.reward_model.enable=False, your "
    "own through reward.custom_reward_function.path) or a reward model on its own GPUs "
    "(reward.reward_model.enable_resource_pool=True). A colocated reward model "
    "(reward.reward_model.enable=True, enable_resource_pool=False) scores only after the "
    "replay buffer has sampled, too late to down-sample; set one of the two above.")


def _check_fields(data, fields: list[str], meta, partition: str, rule: str) -> None:
    """Refuse a sample whose trajectories lack a field the selection reads (TransferQueue
    then returns a TensorDict without it, and indexing it raises a bare KeyError)."""
    missing = [name for name in fields if name not in data.keys()]
    if not missing:
        return
    stored = f" (stored fields: {', '.join(map(str, meta.fields))})" if meta.fields else ""
    if "rm_scores" in missing:
        raise ValueError(NO_REWARDS.format(partition=partition, stored=stored))
    raise ValueError(f"pods_rule {rule!r} reads each trajectory's {', '.join(missing)}, but "
                     f"the trajectories in partition {partition!r} were stored without it"
                     f"{stored}; use a rule of rewards alone, such as max_variance.")
