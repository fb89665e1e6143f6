"""Run by test_fsdp.py under torchrun (2 CPU processes): greedy generation from an
FSDP2-sharded model where the ranks' completions have different lengths.

Rank 0 declares as its end-of-sequence token the token greedy decoding picks first, so its
completions stop after one token; rank 1 keeps the model's own, which the untrained model
does not produce, so its completions run to the limit. Without ``synced_gpus`` rank 0
would leave ``generate`` after one forward pass while rank 1 waits in the next one for
rank 0's weight shards. Each rank checks its rollouts against the same generation on the
unsharded model and writes what it found to OUT/rank_R.json. The model is bf16, so the
shards are float32 master weights gathered in bf16 (pods.runtime.fsdp.shard).

    torchrun --nproc_per_node 2 fsdp_generate.py MODEL_DIR synced|unsynced OUT
"""

import json
import os
import sys
from pathlib import Path

import torch
from torch.distributed.tensor import DTensor
from transformers import AutoModelForCausalLM, AutoTokenizer

from pods.rollout import HFEngine, sample_keys
from pods.runtime.distributed import Dist

MAX_NEW_TOKENS = 6
PROMPTS = ["12+3=", "7*8="]


def main() -> None:
    model_dir, mode, out = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    dist = Dist("cpu", timeout_s=20, parallelism="fsdp2")
    tokenizer = AutoTokenizer.from_pretrained(model_dir, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16)
    keys = sample_keys(0, torch.arange(len(PROMPTS)))

    def rollouts(engine: HFEngine):
        return engine.generate(PROMPTS, 2, 0.0, MAX_NEW_TOKENS, keys)  # greedy: [4, Lc]

    if dist.rank == 0:  # the first greedy token ends rank 0's completions
        first = rollouts(HFEngine(model, tokenizer, chunk=8)).completion_ids[0, 0].item()
        tokenizer.eos_token = tokenizer.convert_ids_to_tokens(first)
    expected = rollouts(HFEngine(model, tokenizer, chunk=8))  # unsharded, this rank's eos
    optimizer = torch.optim.AdamW(model.parameters())
    model, _ = dist.prepare(model, optimizer, torch.bfloat16)  # float32 shards, bf16 compute
    got = rollouts(HFEngine(model, tokenizer, chunk=8, synced=mode == "synced"))
    lengths = dist.gather(got.completion_mask.sum(1).float())  # [8], as the trainer does
    width = expected.completion_ids.shape[1]  # synced: finished rows are padded further
    (out / f"rank_{dist.rank}.json").write_text(json.dumps({
        "sharded": all(isinstance(p, DTensor) for p in model.parameters()),
        "shard_dtypes": sorted({str(p.dtype) for p in model.parameters()}),
        "same_as_unsharded": torch.equal(got.completion_ids[:, :width],
                                         expected.completion_ids) and
        torch.equal(got.completion_mask.sum(1), expected.completion_mask.sum(1)),
        "lengths": lengths.tolist()}))
    dist.barrier()
    torch.distributed.destroy_process_group()  # as pods's CLI does: gloo exits cleanly
    # Its work is written: leave without the interpreter's teardown, in which gloo's threads
    # sometimes still abort a rank (pods.runtime.distributed.leave says why).
    os._exit(0)


if __name__ == "__main__":
    main()
