"""The packed layouts' GPU kernel (pods.models.packed_flex) against the SDPA path, its
oracle: the mask FlexAttention's mask_mod makes is the SDPA path's masks laid over the
stream, the block mask computes every block that mask touches, and FlexAttention's forward
(uncompiled on a CPU, which has no backward) gives the SDPA path's log-probs. The SDPA
path's own gathers read no position twice, and its CUDA form (repeated key and value
heads) equals its CPU form."""

import os
import warnings

import pytest
import torch
from test_packing import LAYOUTS, assert_same, llama, rows

import pods.models.packed_attention as packed_attention
import pods.models.packed_flex as packed_flex
from pods.models.logprobs import packed_logprobs
from pods.models.packed_attention import packed_attention as switched_to_packed
from pods.models.packing import pack


def stream_mask(packing) -> torch.Tensor:
    """[T, T] the SDPA path's two masks laid over the stream (True: may attend)."""
    prompts, completions = packing.masks()  # [G, 1, P, P], [R, 1, C, P + C]
    T = packing.tokens
    dense = torch.zeros(T, T, dtype=torch.bool)
    prompts_of = zip(packing.prompt_index, packing.prompt_valid, strict=True)
    for g, (index, valid) in enumerate(prompts_of):
        for i in valid.nonzero().flatten():
            for j in valid.nonzero().flatten():
                dense[index[i], index[j]] = prompts[g, 0, i, j]
    for r, (index, valid) in enumerate(zip(packing.row_index, packing.row_valid, strict=True)):
        group = packing.row_group[r]
        keys = torch.cat([packing.prompt_index[group], index])  # [P + C]
        key_valid = torch.cat([packing.prompt_valid[group], valid])
        for i in valid.nonzero().flatten():
            for j in key_valid.nonzero().flatten():
                dense[index[i], keys[j]] = completions[r, 0, i, j]
    return dense


def flex_dense(packing, length: int) -> torch.Tensor:
    """[L, L] the mask FlexAttention's mask_mod makes over the padded stream."""
    from torch.nn.attention.flex_attention import create_mask

    group, row = packed_flex.stream_labels(packing, length)
    mask_mod = packed_flex.mask_mod_of(group, row)
    return create_mask(mask_mod, 1, 1, length, length, device="cpu")[0, 0]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_mask_mod_is_the_sdpa_paths_mask(layout):
    packing = pack(*rows(64), share=LAYOUTS[layout])
    T, L = packing.tokens, 128
    dense = flex_dense(packing, L)
    assert torch.equal(dense[:T, :T], stream_mask(packing))
    assert not dense[:T, T:].any() and not dense[T:, :T].any()  # padding apart
    assert dense.diagonal().all()  # no query without a key


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("block", [2, 4, 8])
def test_the_block_mask_computes_every_block_the_mask_touches(monkeypatch, layout, block):
    monkeypatch.setattr(packed_flex, "BLOCK", block)
    packing = pack(*rows(64), share=LAYOUTS[layout])
    L = -(-packing.tokens // block) * block
    dense = flex_dense(packing, L)  # [L, L]
    tiles = dense.view(L // block, block, L // block, block).transpose(1, 2)  # [nb, nb, b, b]
    partial, full = packed_flex.blocks(*packed_flex.stream_labels(packing, L))
    assert not (partial & full).any()
    assert ((partial | full) >= tiles.any(-1).any(-1)).all()  # every touched block
    assert tiles[full].all()  # a full block is all allowed
    assert (~(partial | full)).any()  # blocks skipped
    assert full.any() or block > 2  # blocks without mask_mod (prompts of 3-5 tokens)
    mask = packed_flex.block_mask(packing, L)
    torch.testing.assert_close(mask.to_dense()[0, 0].bool(), partial | full)


def test_the_sdpa_paths_gathers_read_each_position_once():
    packing = pack(*rows(64), share=True)
    order, inverse = packing.slots()
    G, P = packing.prompt_index.shape
    R, C = packing.row_index.shape
    assert len(order) == G * P + R * C and len(order.unique()) == len(order)
    assert sorted(order.tolist()) == list(range(len(order)))  # the stream and spares
    assert torch.equal(order[inverse], torch.arange(packing.tokens))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_repeated_heads_of_cuda_equal_grouped_query_attention(monkeypatch, layout):
    monkeypatch.setattr(packed_attention, "REPEAT_HEADS", ("cpu", "cuda"))
    assert_same(llama(), rows(64), layout)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("block", [4, 128])
def test_flex_attentions_forward_equals_the_sdpa_path(monkeypatch, layout, block):
    monkeypatch.setattr(packed_flex, "BLOCK", block)
    model, data = llama(), rows(64)

    def logprobs(kernel):
        monkeypatch.setenv(packed_flex.ENV, kernel)
        packing = pack(*data, share=LAYOUTS[layout])
        with torch.no_grad(), switched_to_packed(model), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # flex_attention uncompiled: a CPU's forward
            logp = packed_logprobs(model, packing, data[2], data[3], 0.7)
        assert packing.cached("kernel", lambda: None) == kernel
        return logp * data[3]

    torch.testing.assert_close(logprobs("flex"), logprobs("sdpa"), atol=1e-5, rtol=1e-5)


def test_the_kernel_is_flex_on_cuda_only_unless_asked(monkeypatch):
    monkeypatch.delenv(packed_flex.ENV, raising=False)
    assert packed_flex.kernel_for(torch.device("cpu")) == "sdpa"
    assert packed_flex.kernel_for(torch.device("cuda")) == "flex"
    monkeypatch.setenv(packed_flex.ENV, "sdpa")
    assert packed_flex.kernel_for(torch.device("cuda")) == "sdpa"
    monkeypatch.setenv(packed_flex.ENV, "math")
    with pytest.raises(ValueError, match="use one of flex, sdpa"):
        packed_flex.kernel_for(torch.device("cpu"))


def long_rows(vocabulary: int, device: str):
    """Four prompts of 40-150 tokens, each kept by four rows of 1-200 completion tokens
    (one row empty): several 128-blocks, full and partial ones."""
    g = torch.Generator().manual_seed(1)
    plen = torch.randint(40, 150, (4,), generator=g).repeat_interleave(4)  # [16]
    clen = torch.randint(1, 200, (16,), generator=g)
    clen[5] = 0
    Lp, Lc = int(plen.max()), int(clen.max())
    prompt = torch.randint(3, vocabulary, (4, Lp), generator=g).repeat_interleave(4, 0)
    prompt_mask = (torch.arange(Lp) >= Lp - plen[:, None]).long()
    completion_mask = (torch.arange(Lc) < clen[:, None]).long()
    completion = torch.randint(3, vocabulary, (16, Lc), generator=g) * completion_mask
    return tuple(x.to(device) for x in (prompt * prompt_mask, prompt_mask, completion,
                                        completion_mask))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: FlexAttention "
                    "compiles there, and has a backward")
@pytest.mark.parametrize("kernel", ["flex", "sdpa"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_on_cuda_each_kernel_gives_padded_log_probs_and_gradients(monkeypatch, kernel,
                                                                  layout):
    """Compiled FlexAttention, and the SDPA path with repeated heads, against the padded
    layout on the GPU (float32; the kernels' own roundings: TF32 where they take it)."""
    from transformers import AutoModelForCausalLM, LlamaConfig

    monkeypatch.setenv(packed_flex.ENV, kernel)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(LlamaConfig(
        vocab_size=256, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
        num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=512,
        tie_word_embeddings=True)).cuda().train()  # head dim 32, GQA
    assert_same(model, long_rows(256, "cuda"), layout, dict(atol=2e-3, rtol=2e-3))
    assert not packed_flex._failed  # FlexAttention compiled


def test_where_flex_attention_does_not_compile_the_sdpa_path_takes_over(monkeypatch):
    """Every compiled path has a plain twin: a compile error warns once, and this pass and
    the later ones compute with the SDPA path."""
    def broken(*args, **kwargs):
        raise RuntimeError("no kernel for this device")
    monkeypatch.setattr(packed_flex, "COMPILED_ON", ("cpu", "cuda"))
    monkeypatch.setattr(packed_flex, "_compiled", {"flex": broken})
    monkeypatch.setattr(packed_flex, "_failed", [])
    monkeypatch.delenv(packed_flex.ENV, raising=False)
    assert packed_flex.kernel_for(torch.device("cuda")) == "flex"
    model, data = llama(), rows(64)
    monkeypatch.setenv(packed_flex.ENV, "flex")
    with torch.no_grad(), switched_to_packed(model):
        with pytest.warns(RuntimeWarning, match="did not compile .*no kernel"):
            got = packed_logprobs(model, pack(*data, share=True), data[2], data[3], 0.7)
        monkeypatch.setenv(packed_flex.ENV, "sdpa")
        want = packed_logprobs(model, pack(*data, share=True), data[2], data[3], 0.7)
    torch.testing.assert_close(got * data[3], want * data[3])
    monkeypatch.delenv(packed_flex.ENV)
    assert packed_flex.kernel_for(torch.device("cuda")) == "sdpa"  # from now on


def test_the_compiled_kernel_is_not_compiled_again_for_each_micro_batch(monkeypatch):
    """Each micro-batch brings its own stream length (a multiple of BLOCK), labels and
    ``mask_mod`` closure: dynamo compiles FlexAttention for the first length, once more
    with the length symbolic, and then never again (on CUDA a compile takes seconds a
    shape; past dynamo's recompile limit the attention would run unfused). The graphs the
    compiler receives are counted here with a backend that runs them as they are."""
    graphs = []

    def backend(graph, inputs):
        graphs.append(graph)
        return graph.forward

    torch._dynamo.reset()
    monkeypatch.setattr(packed_flex, "COMPILED_ON", ("cpu",))
    monkeypatch.setattr(packed_flex, "_compiled", {"flex": torch.compile(
        packed_flex.flex_attention_fn(), backend=backend)})
    monkeypatch.setattr(packed_flex, "_failed", [])
    lengths = set()
    for k, (prompt, completion) in enumerate([(20, 100), (30, 300), (40, 600), (25, 900),
                                              (50, 1200), (10, 1500)]):
        g = torch.Generator().manual_seed(k)
        clen = torch.randint(1, completion + 1, (4, 1), generator=g)
        mask = (torch.arange(completion) < clen).long()
        packing = pack(torch.randint(3, 60, (1, prompt), generator=g).repeat(4, 1),
                       torch.ones(4, prompt, dtype=torch.long),
                       torch.randint(3, 60, (4, completion), generator=g) * mask, mask,
                       share=True)
        T = packing.tokens
        query, key = torch.randn(1, 4, T, 8), torch.randn(2, 1, 2, T, 8)
        out = packed_flex.flex_packed(query, key[0], key[1], packing, None)
        assert out.shape == (1, T, 4, 8)
        lengths.add(-(-T // packed_flex.BLOCK))
    assert len(lengths) >= 4 and len(graphs) <= 2, (sorted(lengths), len(graphs))
    torch._dynamo.reset()


def test_the_compiled_kernel_is_kept_in_the_pods_cache(monkeypatch, tmp_path):
    """FlexAttention's kernels go where the decode loop's do (pods.models.cache.compile_cache:
    built once a machine), set before torch.compile is asked for them."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "unset")  # restored after the test
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR")
    monkeypatch.setenv("PODS_CACHE", str(tmp_path))
    monkeypatch.setattr(packed_flex, "COMPILED_ON", ("cpu",))
    monkeypatch.setattr(packed_flex, "_compiled", {})
    packed_flex._flex(torch.device("cpu"))  # compiled lazily: nothing is built here
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "compile")
