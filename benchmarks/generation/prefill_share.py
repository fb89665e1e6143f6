"""How much of the hf engine's generation is the prompts' prefill, and so what prefilling each
prompt once for its n rows (its KV cache then copied to the rows) could save.

The hf engine decodes P*n rows: its prefill runs the model on every row's prompt, n copies
of each. Here, on SmolLM2-135M's architecture (random weights, float32, the CPU), at the
SmolLM2 showcase's shape (P = 4 prompts of 130 tokens, n = 16, 200 new tokens): the
seconds of a prefill of the P*n rows, of the P distinct prompts alone, and of one whole
``generate`` of P*n rows (transformers' generate with a static cache, as the engine's
``hf_decode generate``; greedy, every row running the 200 tokens). The saving is at most
prefill(P*n) - prefill(P), as a share of the generation.

    python benchmarks/generation/prefill_share.py
    python benchmarks/generation/prefill_share.py --quick   # a 2-layer model, 8 new tokens
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the suite
import suite  # noqa: E402

P, N, PROMPT, NEW = 4, 16, 130, 200
SMOLLM2 = dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
               num_attention_heads=9, num_key_value_heads=3, tie_word_embeddings=True)
QUICK = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)


def seconds(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    parser = suite.parser(__doc__, "a 2-layer model of 64, 8 new tokens")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    arch, new = (QUICK, 8) if args.quick else (SMOLLM2, NEW)
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(max_position_embeddings=1024, **arch)).eval()
    prompts = torch.randint(3, arch["vocab_size"], (P, PROMPT))
    rows = prompts.repeat_interleave(N, 0)  # [P*n, Lp] as the engine encodes them
    with torch.no_grad():
        every = seconds(lambda: model(rows, use_cache=True), args.repeats)
        once = seconds(lambda: model(prompts, use_cache=True), args.repeats)
        whole = seconds(lambda: model.generate(
            rows, attention_mask=torch.ones_like(rows), max_new_tokens=new, min_new_tokens=new,
            do_sample=False, cache_implementation="static", pad_token_id=0), 1)
    saving = (every - once) / whole
    print(suite.machine())
    print(suite.markdown(
        ["shape", "prefill of P*n rows s", "prefill of P prompts s", "generate s",
         "at most saved"],
        [[f"P={P} n={N}, {PROMPT}+{new} tokens", f"{every:.2f}", f"{once:.2f}",
          f"{whole:.2f}", f"{saving:.0%}"]]))
    suite.write_json(args.json, [{"prefill_rows_s": every, "prefill_prompts_s": once,
                                  "generate_s": whole, "saving": saving}])


if __name__ == "__main__":
    main()
