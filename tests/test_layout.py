"""The package's shape, held by tests: responsibilities in subpackages, no import cycles,
short modules, and ``import pods`` that stays light."""

import ast
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "pods"
MODULES = {".".join(p.relative_to(SRC.parent).with_suffix("").parts).removesuffix(".__init__"): p
           for p in SRC.rglob("*.py")}


def imports_at_load(path: Path) -> set[str]:
    """The pods modules a module imports when it is loaded (top level, not inside functions
    or TYPE_CHECKING blocks)."""
    found = set()
    for node in ast.parse(path.read_text()).body:
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        found |= {n for n in names if n in MODULES}
    return found


def test_no_import_cycles():
    graph = {name: imports_at_load(path) - {name} for name, path in MODULES.items()}
    done: set[str] = set()

    def visit(name: str, stack: list[str]) -> None:
        for nxt in sorted(graph[name]):
            assert nxt not in stack, f"import cycle: {' -> '.join([*stack, nxt])}"
            if nxt not in done:
                visit(nxt, [*stack, nxt])
        done.add(name)

    for name in sorted(graph):
        visit(name, [name])


def test_modules_are_short_and_few_sit_at_the_top():
    long = {name: n for name, p in MODULES.items() if (n := len(p.read_text().splitlines())) > 310}
    assert not long, f"modules over ~300 lines: {long}"
    top = sorted(p.name for p in SRC.glob("*.py"))
    assert len(top) <= 6, top


def test_import_pods_loads_no_heavy_stack():
    code = ("import sys, pods, pods.config, pods.cli; "
            "print(sorted(m for m in ('transformers', 'vllm', 'verl', 'trl', 'peft', "
            "'datasets', 'matplotlib', 'scipy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"
