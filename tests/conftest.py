import os

import pytest
import torch

from fixture_data import FIXTURE_DATA
from scheduling import long_first
from toy_task import EvenStart


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    """Tests never read or write the user's ~/.cache/pods."""
    monkeypatch.setenv("PODS_CACHE", str(tmp_path_factory.getbasetemp() / "pods-cache"))


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """An untrained, very small Qwen2 model + character tokenizer saved like a hub model."""
    from pods.models.tiny import TinyRecipe, build_model, build_tokenizer
    from pods.tasks.arithmetic import Arithmetic

    path = tmp_path_factory.mktemp("tiny-model")
    tokenizer = build_tokenizer(Arithmetic.alphabet)
    recipe = TinyRecipe(alphabet=Arithmetic.alphabet, hidden_size=32, layers=1, heads=2)
    build_model(recipe, tokenizer).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# Under pytest-xdist (`make test` runs the core suite on 2 workers): each worker's torch, and
# the processes it starts, get their share of the cores; two processes whose OpenMP
# threads each take every core slow each other several times over.
WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if WORKERS > 1:
    os.environ["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // WORKERS))
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


@pytest.fixture(autouse=True)
def _toy_task(monkeypatch):
    from pods.tasks import TASKS

    monkeypatch.setitem(TASKS, "even_start", EvenStart)


CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


@pytest.fixture(scope="session")
def chat_model_dir(tmp_path_factory):
    """A tiny Qwen2 with a byte-level BPE tokenizer (trained on the fixture texts) and a
    Qwen-style chat template: the shape of a real instruct model, built offline."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    from pods.tasks.math.tasks import SYSTEM_PROMPT

    texts = [SYSTEM_PROMPT, "<think> </think> <answer> </answer> \\boxed{} 0123456789"]
    texts += [p.read_text() for p in FIXTURE_DATA.rglob("*.jsonl")]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(texts, trainers.BpeTrainer(
        vocab_size=600, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>",
                                        pad_token="<|endoftext|>", padding_side="left")
    tokenizer.chat_template = CHAT_TEMPLATE
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64,
                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
                         max_position_embeddings=1024, tie_word_embeddings=True,
                         eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id)
    path = tmp_path_factory.mktemp("chat-model")
    Qwen2ForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


PINNED_STACKS = {  # marker: (module it needs, where it runs)
    "vllm": ("vllm", "needs vLLM: run in .venv-vllm (make test / tox -e vllm)"),
    "verl": ("verl", "needs verl: run in .venv-verl (make test / tox -e verl)"),
}


GPU_REASON = "needs a CUDA GPU: make test-gpu runs it on one"


def pytest_collection_modifyitems(config, items):
    """Tests marked vllm or verl need a stack that lives in its own environment (.venv-vllm,
    .venv-verl, made by tox); elsewhere they are skipped with that said (`make test` runs
    them there). Tests marked gpu need a CUDA GPU: without one they are collected and
    skipped with that said (`make test-gpu` runs them). The longest files go first
    (tests/scheduling.py)."""
    import importlib.util

    if not torch.cuda.is_available():
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(pytest.mark.skip(reason=GPU_REASON))

    for marker, (module, reason) in PINNED_STACKS.items():
        if importlib.util.find_spec(module) is not None:
            continue
        for item in items:
            if marker in item.keywords:
                item.add_marker(pytest.mark.skip(reason=reason))
    long_first(items)


@pytest.fixture(scope="session")
def vllm_model_dir(tmp_path_factory):
    """A small random Qwen2 with head size 32 (the smallest vLLM's CPU attention takes)
    and sharp next-token distributions (large init), so greedy decoding has no near-ties."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from pods.models.tiny import build_tokenizer
    from pods.tasks.arithmetic import Arithmetic

    tokenizer = build_tokenizer(Arithmetic.alphabet)
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128,
                         num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                         max_position_embeddings=64, tie_word_embeddings=True,
                         initializer_range=0.3, bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id)
    path = tmp_path_factory.mktemp("vllm-model")
    Qwen2ForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)
