"""The pages agree on what has run on a GPU, list every guide, and speak of pods alone.

The one list of what has run on a GPU is the table under "What has run on a GPU" on the
results page (docs/results.md), one row per date; below it, a paragraph names what has not
yet run on a GPU. Every other page may say less, but not otherwise: no page may claim that
no GPU was ever used, a dated H100 or H200 run must carry a date of that table, and the
README's status table marks as run what the list says ran and as not yet run what it says
has not. README.md, docs/ and the docstrings and comments under src/ cite no bare issue
numbers and say nothing of how pods is measured (machines lent for sessions, GPU windows).
"""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
SOURCES = sorted((ROOT / "src").rglob("*.py"))
RESULTS = ROOT / "docs" / "results.md"
DATE = re.compile(r"20\d\d-\d\d-\d\d")

# claims that no GPU was ever used, or that pods ran on CPUs alone
NO_GPU_EVER = re.compile(
    r"no GPU (?:has|had|was|were|is)\b[^.]{0,40}?\b(?:lent|available|used)"
    r"|\(no GPU(?: here)?\)|: no GPU\)|no GPU here|on (?:a 2-core )?CPUs? only"
    r"|(?:almost|nearly) everything[^.]{0,40}CPUs only|little of this has run on a GPU",
    re.I)
# how the project is measured, not what pods is
MEASUREMENT = re.compile(r"\blent\b|GPU window|(?<!\{)\bsessions?\b(?! bus)|device minutes"
                         r"|minutes of (?:GPU|device) time|carr(?:y|ies) at most", re.I)
BARE_ISSUE = re.compile(r"\bissues? #?\d+|(?<![\w/&(\[])#\d+\b(?![\w-])", re.I)


def _name(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _section(text: str, heading: str) -> str:
    start = text.index(heading)
    end = text.find("\n#", start + len(heading))
    return text[start:end if end >= 0 else len(text)]


def gpu_list() -> tuple[dict[str, str], str]:
    """({date: what ran}, the paragraph of what has not yet run) from the results page."""
    section = _section(RESULTS.read_text(), "### What has run on a GPU")
    rows = [line.split("|")[1:-1] for line in section.splitlines()
            if line.startswith("|") and DATE.search(line.split("|")[1])]
    ran = {DATE.search(date)[0]: " ".join(cells) for date, *cells in rows}
    not_yet = section[section.index("**Not yet run on a GPU**"):]
    return ran, not_yet


def _page_param(path: Path):
    return pytest.param(path, id=_name(path))


def test_the_list_has_the_known_runs():
    ran, not_yet = gpu_list()
    assert {"2026-11-25", "2026-11-27", "2026-11-28"} <= set(ran)
    assert "smollm2_gpu.yaml" in ran["2026-11-28"] and "10.5% -> 63.3%" in ran["2026-11-28"]
    assert "vllm engine" in not_yet and "NCCL" in not_yet


@pytest.mark.parametrize("path", [_page_param(p) for p in PAGES])
def test_no_page_says_no_gpu_was_ever_used(path):
    found = [m[0] for m in NO_GPU_EVER.finditer(" ".join(path.read_text().split()))]
    assert found == [], f"{_name(path)} contradicts docs/results.md#what-has-run-on-a-gpu"


@pytest.mark.parametrize("path", PAGES, ids=_name)
def test_dated_gpu_runs_are_on_the_list(path):
    """A date written beside an H100 or H200 (within its sentence) is a date of the list."""
    dates = set(gpu_list()[0])
    text = " ".join(path.read_text().split())
    for gpu in re.finditer(r"H[12]00", text):
        before = text.rfind(". ", 0, gpu.start())
        after = text.find(". ", gpu.end())
        sentence = text[before + 1:after if after >= 0 else len(text)]
        assert set(DATE.findall(sentence)) <= dates, (_name(path), sentence)


# README status rows (by their capability's opening words) -> what the list says of them
RAN = {"trainer:": "the trainer", "the embedded default": "the embedded default",
       "real models": "smollm2_gpu.yaml", "`hf` engine": "hf engine",
       "the update's layouts": "the update's layouts"}
NOT_RUN = {"`vllm` engine": "vllm engine", "DDP, FSDP2": "NCCL", "PODS in TRL": "TRL",
           "PODS in verl": "verl", "`pods env`, `pods check`": "`pods check`"}


def test_readme_status_agrees_with_the_list():
    ran, not_yet = gpu_list()
    rows = {line.split("|")[1].strip(): line.split("|")[3]
            for line in _section((ROOT / "README.md").read_text(), "## Status").splitlines()
            if line.startswith("| ")}
    for start, phrase in RAN.items():
        assert any(phrase in what for what in ran.values()), phrase
        (cell,) = [gpu for name, gpu in rows.items() if name.startswith(start)]
        assert set(DATE.findall(cell)) & set(ran) and "not yet" not in cell, (start, cell)
    for start, phrase in NOT_RUN.items():
        assert phrase in not_yet, phrase
        (cell,) = [gpu for name, gpu in rows.items() if name.startswith(start)]
        assert cell.strip().startswith("not yet run"), (start, cell)


def test_the_index_and_the_nav_list_every_guide():
    index = (ROOT / "docs" / "index.md").read_text()
    nav = (ROOT / "mkdocs.yml").read_text()
    for guide in sorted((ROOT / "docs" / "guides").glob("*.md")):
        assert f"(guides/{guide.name})" in index, guide.name
        assert f"guides/{guide.name}" in nav, guide.name


@pytest.mark.parametrize("path", PAGES + SOURCES, ids=_name)
def test_no_bare_issue_numbers(path):
    """A reader has no issue tracker to look them up in: say what the change was."""
    assert [m[0] for m in BARE_ISSUE.finditer(path.read_text())] == [], _name(path)


@pytest.mark.parametrize("path", [_page_param(p) for p in PAGES] + SOURCES,
                         ids=lambda p: _name(p) if isinstance(p, Path) else None)
def test_nothing_about_how_pods_is_measured(path):
    text = path.read_text()
    if path.suffix == ".py":  # comments and docstrings: "session" is a sandbox's there
        found = [m[0] for m in MEASUREMENT.finditer(text) if "session" not in m[0].lower()]
    else:
        found = [m[0] for m in MEASUREMENT.finditer(" ".join(text.split()))]
    assert found == [], _name(path)


def test_the_patterns_catch_what_they_are_for():
    assert NO_GPU_EVER.search("no GPU has been lent to this project yet")
    assert NO_GPU_EVER.search("not run here: no GPU)")
    assert not NO_GPU_EVER.search("the vllm engine has not yet run on a GPU")
    assert MEASUREMENT.search("in short lent sessions") and MEASUREMENT.search("a GPU window")
    assert not MEASUREMENT.search("no D-Bus session bus; keys {uid}_{session}_{index}")
    assert BARE_ISSUE.search("since issue 36 it runs") and BARE_ISSUE.search("fixed in #51.")
    assert not BARE_ISSUE.search("[above](#30-minutes-of-training) and &#8212;")


GIB, MIB = 2**30, 2**20


def test_the_gpu_guides_memory_adds_up_to_the_measured_peak():
    """docs/guides/gpu.md's arithmetic, redone: the measured 78.7 GiB peak of a float32-master
    update (Qwen2.5-1.5B, 64 rows x 288 tokens) splits into the trained state (16 bytes a
    parameter), the bf16 casts (2) and 2.94 MiB of activations a token; each set-up's
    training total is the sum of its cells, and generation comes on top: the hf engine's
    float32 KV cache, or vLLM's 0.3 of 79.6 GiB."""
    guide = " ".join((ROOT / "docs" / "guides" / "gpu.md").read_text().split())
    state, casts = 16 * 1.54e9 / GIB, 2 * 1.54e9 / GIB  # 22.9 and 2.9 GiB
    activations = 78.7 - state - casts  # 52.9 GiB
    per_token = activations * GIB / MIB / (64 * 288)  # 2.94 MiB
    assert (f"{state:.1f}", f"{casts:.1f}", f"{activations:.1f}", f"{per_token:.2f}") == \
        ("22.9", "2.9", "52.9", "2.94")
    assert "peaked at **78.7 GiB**" in guide and "**2.94 MiB a token**" in guide
    assert f"{0.3 * 79.6:.1f} GiB" in guide and f"{79.6 - 0.3 * 79.6:.1f} GiB" in guide
    # float32 K and V of 64 rows x 1,024 tokens: layers x 2 KV heads x head size x 4 bytes
    kv = {"1.5B": 64 * 1024 * 2 * 28 * 2 * 128 * 4 / GIB,
          "0.5B": 64 * 1024 * 2 * 24 * 2 * 64 * 4 / GIB}
    assert (f"{kv['0.5B']:.1f}", f"{kv['1.5B']:.1f}") == ("1.5", "3.5")
    table = _section((ROOT / "docs" / "guides" / "gpu.md").read_text(), "The set-ups, by")
    rows = [line.split("|")[1:-1] for line in table.splitlines()
            if line.startswith("| ") and "GPU" in line.split("|")[1]]
    assert len(rows) == 6
    totals = []
    for name, *cells in rows:
        parts = [float(n) for cell in cells[:3]
                 for n in re.findall(r"(?:= |^ )(\d+\.\d)|(\d+\.\d) (?:base|adapters)", cell)
                 for n in n if n]
        training, engine = float(cells[3]), cells[4].strip()
        assert abs(sum(parts) - training) <= 0.15, cells
        extra, total = (float(x) for x in re.findall(r"(\d+\.\d):? (\d+\.\d)", cells[5])[0])
        model = "0.5B" if "0.5B" in name else "1.5B"
        assert extra == round(0.3 * 79.6 if engine == "vllm" else kv[model], 1), cells
        assert abs(training + extra - total) <= 0.15, cells
        totals.append((f"{training:.1f}", f"{extra:.1f}", f"{total:.1f}"))
    sums = re.findall(r"(\d+\.\d) \+ (\d+\.\d) = (\d+\.\d)", _section(
        (ROOT / "docs" / "guides" / "gpu.md").read_text(), "Pick a set-up"))
    assert sorted(sums) == sorted(totals)  # the first table repeats these sums


def test_the_pages_agree_on_the_numbers_a_newcomer_reads_first():
    """`make run`'s minutes are the same on the README and the getting-started page;
    memory is in GiB where the GPU guide gives it (the LoRA adapters' 0.45 GiB, 1.8 GiB
    with their state, on both pages); install hints name the clone the README installs
    from; no page says nothing has run on a GPU a few lines after a GPU figure."""
    readme = (ROOT / "README.md").read_text()
    start = (ROOT / "docs" / "getting-started.md").read_text()
    minutes = re.compile(r"make run .*?\((\d+-\d+) minutes on a 2-core CPU\)")
    assert minutes.search(readme)[1] == minutes.search(start)[1]
    machine = (ROOT / "docs" / "guides" / "new-machine.md").read_text()
    gpu = (ROOT / "docs" / "guides" / "gpu.md").read_text()
    assert "0.45 GiB" in machine and "1.8 GiB" in machine and "1.8 GiB" in gpu
    assert "0.5 GB" not in machine
    configs = sorted(p for p in (ROOT / "configs").rglob("*") if p.suffix in (".yaml", ".sh"))
    for path in PAGES + SOURCES + configs:
        text = path.read_text()
        # pods-rl is not on PyPI yet: an install hint works from the clone, and names the
        # package only as what to run once it is published
        for hint in re.finditer(r"pip install 'pods-rl\[", text):
            assert "once pods-rl is on PyPI" in text[hint.start():hint.start() + 80], \
                _name(path)
        assert "None of these has run on a GPU" not in text, _name(path)
    assert "Q4_1 GGUF" in readme  # what "from PyPI" is, where it is claimed
