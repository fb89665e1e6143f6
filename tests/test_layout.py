"""The package's shape, held by tests: responsibilities in subpackages, folders in one order
(every import points down it), no import cycles, short modules, and ``import pods`` that
stays light."""

import ast
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "pods"
MODULES = {".".join(p.relative_to(SRC.parent).with_suffix("").parts).removesuffix(".__init__"): p
           for p in SRC.rglob("*.py")}


def _type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def imports(name: str, path: Path) -> set[str]:
    """Every pods module that module ``name`` names in an import statement: at the top and
    inside functions alike (a deferred import is still a dependency), skipping only
    ``if TYPE_CHECKING:`` blocks, which never run. Relative imports are resolved; a name
    imported from a package counts as its module where it is one."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def walk(node: ast.AST) -> None:
        if _type_checking(node):
            return
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            names = [base] + [f"{base}.{a.name}" for a in node.names]
        found.update(n for n in names if n in MODULES)
        for child in ast.iter_child_nodes(node):
            walk(child)

    walk(ast.parse(path.read_text()))
    return found - {name}


GRAPH = {name: imports(name, path) for name, path in MODULES.items()}


def test_no_import_cycles_deferred_imports_included():
    """No module reaches itself through the modules it imports. (Python also loads a
    module's parent packages first; those implicit edges are not counted: a registry in a
    package's __init__ importing its submodules on demand is the point of the layout.)"""
    done: set[str] = set()

    def visit(name: str, stack: list[str]) -> None:
        for nxt in sorted(GRAPH[name]):
            assert nxt not in stack, f"import cycle: {' -> '.join([*stack, nxt])}"
            if nxt not in done:
                visit(nxt, [*stack, nxt])
        done.add(name)

    for name in sorted(GRAPH):
        visit(name, [name])


# pods's folders (and top-level modules) from the ground floor up: a module may import
# from its own folder and from the folders below it, never from one above. A new folder
# takes its place here.
LAYERS = (
    "core",  # the math: tensors in, tensors out
    "pods",  # the package itself (its version, the core names it re-exports)
    "config",  # the configuration, its fixed choices and checks
    "runtime",  # devices, processes and their groups, FSDP2
    "sandbox",  # isolation of untrusted programs
    "tracking",  # experiment trackers
    "runs",  # the run folder's format: checkpoints' places, metrics.jsonl
    "tasks",  # data and rewards
    "models",  # loading, the embedded model, log-probs
    "rollout",  # generation engines
    "evaluation",  # test-set metrics from an engine
    "train",  # the trainer, the run around it
    "integrations",  # PODS inside TRL and verl
    "experiments",  # comparisons, their summaries and plots
    "check",  # `pods check` and `pods env`
    "cli",  # the `pods` command and its verbs
    "__main__",  # python -m pods
)


def folder(module: str) -> str:
    """pods.train.run -> train; pods.evaluation -> evaluation; pods -> pods."""
    return module.split(".")[1] if "." in module else module


def upward(graph: dict[str, set[str]]) -> list[str]:
    """The imports of ``graph`` (module -> modules it imports) that point up ``LAYERS``."""
    return sorted(f"{source} -> {target}" for source, targets in graph.items()
                  for target in targets
                  if LAYERS.index(folder(target)) > LAYERS.index(folder(source)))


def test_folders_import_only_downwards_deferred_imports_included():
    """Between folders, every import (at the top or inside a function) points down
    ``LAYERS``: no folder reaches one above it, so the folders form no loop even where
    the module graph has none."""
    unplaced = sorted({folder(m) for m in MODULES} - set(LAYERS))
    assert not unplaced, f"place these folders in LAYERS: {unplaced}"
    found = upward(GRAPH)
    assert not found, "imports pointing up the layers:\n" + "\n".join(found)


def test_the_layer_check_finds_an_upward_import():
    graph = {"pods.runs.metrics": {"pods.train.run", "pods.config"},  # up, then down
             "pods.train.run": {"pods.runs.metrics"}, "pods.cli.export": {"pods.models.tiny"}}
    assert upward(graph) == ["pods.runs.metrics -> pods.train.run"]


def test_the_scan_sees_deferred_and_relative_imports(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                      "    import pods.train\n\ndef f():\n    from pods.config import checks\n")
    assert imports("pods.x", module) == {"pods.config", "pods.config.checks"}
    assert "pods.train.checks" in GRAPH["pods.train.trainer"]  # a top-level import


def test_config_depends_on_nothing_above_it():
    """pods.config imports only itself and pods.core (the loss's and advantages' fixed
    choices): the components import their config groups, never the other way round."""
    above = {name: sorted(t for t in targets if not t.startswith(("pods.config", "pods.core")))
             for name, targets in GRAPH.items() if name.startswith("pods.config")}
    assert not any(above.values()), above


def test_modules_are_short_and_few_sit_at_the_top():
    """No module of the package or of the benchmark suite is over 300 lines."""
    root = SRC.parents[1]
    files = [*SRC.rglob("*.py"), *(root / "benchmarks").rglob("*.py")]
    long = {str(p.relative_to(root)): n for p in files
            if (n := len(p.read_text().splitlines())) > 300}
    assert not long, f"modules over 300 lines: {long}"
    top = sorted(p.name for p in SRC.glob("*.py"))
    assert len(top) <= 6, top


MAX_PARAMETERS = 6  # self/cls aside; *args and **kwargs count one each
RESTRUCTURED: set[tuple[str, str]] = set()  # (module, function) exempted while it moves


def parameters(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """How many parameters a caller may pass: self/cls aside, *args and **kwargs one each."""
    a = node.args
    names = [p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
    bound = 1 if names[:1] in (["self"], ["cls"]) else 0
    return len(names) - bound + (a.vararg is not None) + (a.kwarg is not None)


def long_signatures(name: str, path: Path) -> list[str]:
    """The functions and methods of module ``name`` that take more than MAX_PARAMETERS."""
    return [f"{name}.{node.name} ({parameters(node)})" for node in ast.walk(ast.parse(
        path.read_text())) if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and parameters(node) > MAX_PARAMETERS and (name, node.name) not in RESTRUCTURED]


def test_no_function_takes_more_than_six_parameters():
    """A longer list is a value object waiting to be named (an EngineSpec, a PolicyLoss's
    settings, a sandbox's Limits): group what travels together, or split the function."""
    long = [entry for name, path in sorted(MODULES.items())
            for entry in long_signatures(name, path)]
    assert not long, f"functions over {MAX_PARAMETERS} parameters: {long}"


def test_the_parameter_count_sees_every_kind(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("class C:\n    def m(self, a, b, /, c, *d, e, f, **g): ...\n"
                      "    @classmethod\n    def k(cls, a, b, c, d, e, f): ...\n"
                      "async def h(a, b, c, d, e, f, g=1): ...\n"
                      "def lam():\n    return lambda a, b, c, d, e, f, g: 0\n")
    assert sorted(long_signatures("pods.m", module)) == ["pods.m.h (7)", "pods.m.m (7)"]


def test_import_pods_loads_no_heavy_stack():
    code = ("import sys, pods, pods.config, pods.cli; "
            "print(sorted(m for m in ('transformers', 'vllm', 'verl', 'trl', 'peft', "
            "'datasets', 'matplotlib', 'scipy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"
