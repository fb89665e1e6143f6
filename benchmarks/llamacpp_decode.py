"""llama.cpp's batched decoding of SmolLM2-135M on this machine: is it a faster engine than vLLM?

The same work as ``benchmarks/generation_profile.py`` (P x 16 rollouts of the showcase's
chat-templated word problems, up to 128 new tokens at T = 0.9): the shipped Q4_1 GGUF is
rewritten with its tensors dequantized to bf16 (the weights pods trains, in the dtype the
vllm engine computes in), each distinct prompt is prefilled once and its KV cache copied to
its 16 rollouts, then all live rollouts decode one token per ``llama_decode`` call, sampled
in numpy from softmax(logits / T). Per-sequence KV streams (``kv_unified`` off: with one
unified cache every sequence attends over all of it, 68 tokens/s at 256 rows in a first try)
and flash attention on. Nothing here is a pods engine: it measures whether one would pay.

llama-cpp-python has no wheel on PyPI: ``pip install llama-cpp-python`` builds llama.cpp from
source (13 minutes on 2 cores).

    .venv/bin/pip install llama-cpp-python==0.3.36
    .venv/bin/python benchmarks/llamacpp_decode.py --rows 64,256
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

NEW, T, N = 128, 0.9, 16


def bf16_gguf(src: Path, dst: Path) -> Path:
    """``src`` with every tensor dequantized (matrices stored as bf16), metadata copied."""
    import gguf

    reader = gguf.GGUFReader(src)
    arch = reader.fields["general.architecture"]
    writer = gguf.GGUFWriter(dst, bytes(arch.parts[arch.data[0]]).decode())
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        kind = field.types[0]
        if kind == gguf.GGUFValueType.ARRAY:
            sub = field.types[1]
            values = [bytes(field.parts[i]).decode("utf-8", "replace")
                      if sub == gguf.GGUFValueType.STRING else field.parts[i].tolist()[0]
                      for i in field.data]
            writer.add_key_value(name, values, kind, sub_type=sub)
        elif kind == gguf.GGUFValueType.STRING:
            writer.add_key_value(name, bytes(field.parts[field.data[0]]).decode(), kind)
        else:
            writer.add_key_value(name, field.parts[field.data[0]].tolist()[0], kind)
    for tensor in reader.tensors:
        data = gguf.quants.dequantize(tensor.data, tensor.tensor_type).astype(np.float32)
        data = data.reshape([int(x) for x in reversed(tensor.shape)])
        if data.ndim == 2:
            bf16 = gguf.GGMLQuantizationType.BF16
            writer.add_tensor(tensor.name, gguf.quants.quantize(data, bf16), raw_dtype=bf16)
        else:
            writer.add_tensor(tensor.name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return dst


class Decoder:
    """A llama.cpp context for ``rows`` sequences and the batch that feeds it."""

    def __init__(self, path: Path, rows: int, longest_prompt: int):
        import llama_cpp as lc

        self.lc = lc
        lc.llama_backend_init()
        self.model = lc.llama_model_load_from_file(str(path).encode(),
                                                   lc.llama_model_default_params())
        self.vocab = lc.llama_vocab_n_tokens(lc.llama_model_get_vocab(self.model))
        params = lc.llama_context_default_params()
        params.n_ctx = rows * (longest_prompt + NEW)
        params.n_batch, params.n_ubatch, params.n_seq_max = 4096, 512, rows
        params.n_threads = params.n_threads_batch = 2
        params.kv_unified, params.flash_attn_type = False, 1
        self.ctx = lc.llama_init_from_model(self.model, params)
        self.memory = lc.llama_get_memory(self.ctx)
        self.batch = lc.llama_batch_init(max(rows, 4096), 0, 1)

    def decode(self, tokens: list[int], positions: list[int], seqs: list[int],
               last_only: bool) -> np.ndarray:
        """Logits [k, V] of the rows asked for (all, or the last)."""
        b = self.batch
        b.n_tokens = len(tokens)
        for i, (tok, pos, seq) in enumerate(zip(tokens, positions, seqs, strict=True)):
            b.token[i], b.pos[i], b.n_seq_id[i], b.seq_id[i][0] = tok, pos, 1, seq
            b.logits[i] = not last_only or i == len(tokens) - 1
        if self.lc.llama_decode(self.ctx, b) != 0:
            raise RuntimeError("llama_decode failed")
        k = 1 if last_only else len(tokens)
        start = len(tokens) - k
        return np.ctypeslib.as_array(self.lc.llama_get_logits_ith(self.ctx, start),
                                     shape=(k, self.vocab))


def sample(logits: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    z = logits / T
    p = np.exp(z - z.max(1, keepdims=True))
    c = p.cumsum(1)
    return np.minimum((c < rng.random((len(z), 1)) * c[:, -1:]).sum(1), len(z[0]) - 1)


def generate(decoder: Decoder, prompts: list[list[int]], eos: int) -> tuple[int, int, float]:
    """(tokens generated, longest completion, seconds) for len(prompts) x N rollouts."""
    rng = np.random.default_rng(0)
    decoder.lc.llama_memory_clear(decoder.memory, True)
    start = time.perf_counter()
    first, lengths = [], []
    for p, ids in enumerate(prompts):  # each prompt once, its cache copied to its rollouts
        logits = decoder.decode(ids, list(range(len(ids))), [p * N] * len(ids), True)
        for r in range(1, N):
            decoder.lc.llama_memory_seq_cp(decoder.memory, p * N, p * N + r, -1, -1)
        first += list(sample(np.repeat(logits, N, 0), rng))
        lengths += [len(ids)] * N
    tokens, alive = np.array(first), np.array(first) != eos
    generated, longest = len(tokens), 1
    for step in range(1, NEW):
        live = np.nonzero(alive)[0]
        if not len(live):
            break
        logits = decoder.decode([int(tokens[s]) for s in live],
                                [lengths[s] + step - 1 for s in live], [int(s) for s in live],
                                False)
        tokens[live] = sample(logits, rng)
        alive[live[tokens[live] == eos]] = False
        generated, longest = generated + len(live), step + 1
    return generated, longest, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="64,256", help="P x 16 rollouts")
    args = parser.parse_args()
    from transformers import AutoTokenizer

    from pods.models.fetch import gguf_path
    from pods.models.source import resolve
    from smollm2_speed import prompts

    folder = resolve("smollm2", None, log=lambda *a: None)
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    scratch = tempfile.TemporaryDirectory(prefix="pods-llamacpp-")  # never the model's cache
    path = bf16_gguf(gguf_path("smollm2"), Path(scratch.name) / "bf16.gguf")
    print(f"# llama.cpp (llama-cpp-python), bf16 GGUF, 2 threads; up to {NEW} new tokens "
          f"at T={T}\n\n| rows | seconds | tokens generated | tokens/s | rows x longest / s |"
          f"\n|---:|---:|---:|---:|---:|")
    for rows in (int(r) for r in args.rows.split(",")):
        ids = [tokenizer(t, add_special_tokens=False)["input_ids"]
               for t in prompts(tokenizer, rows // N)]
        decoder = Decoder(path, rows, max(len(i) for i in ids))
        generate(decoder, ids[:1], tokenizer.eos_token_id)  # warm-up
        generated, longest, seconds = generate(decoder, ids, tokenizer.eos_token_id)
        print(f"| {rows} | {seconds:.1f} | {generated} | {generated / seconds:.0f} | "
              f"{rows * longest / seconds:.0f} |")


if __name__ == "__main__":
    main()
