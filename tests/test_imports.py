"""The process boundary and the import graph: the web process never imports torch, the model or the GPU worker
package, and no module of the package takes part in an import circle."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from live_server import REPO

PACKAGE = Path(REPO) / "realtime_tts"
# What runs only inside a GPU worker process (or a test/bench that drives it directly).
WORKER_SIDE = ("realtime_tts.gpu_worker", "realtime_tts.model")


def test_web_process_imports_neither_torch_nor_the_worker_package() -> None:
    code = (
        "import sys\n"
        "import realtime_tts.api, realtime_tts.cli, realtime_tts.service, realtime_tts.engine.client\n"
        "from realtime_tts.api import create_app\n"
        "from realtime_tts.config import load_config\n"
        "create_app(load_config(env={}))\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'torchaudio', 'transformers', 'triton')"
        f" or m.startswith({WORKER_SIDE!r}))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "", f"web process imported: {out.stdout.strip()}"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _runtime_imports(path: Path, modules: set[str]) -> set[str]:
    """Package modules this file imports when it runs (lazy imports inside functions too), leaving out
    `if TYPE_CHECKING:` blocks, which never execute."""
    tree = ast.parse(path.read_text())
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return {m for m in found if m in modules}


def _graph() -> dict[str, set[str]]:
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    modules = set(files)
    graph = {}
    for name, path in files.items():
        # a package's __init__ is imported with any of its modules: edges into a package are edges to __init__
        graph[name] = {m for m in _runtime_imports(path, modules) if m != name and not name.startswith(m + ".")}
    return graph


def test_no_import_circle_in_the_package() -> None:
    graph = _graph()
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1 = on the stack, 2 = done

    def dfs(node: str, stack: list[str]) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                dfs(nxt, stack)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            dfs(node, [])
    assert cycles == [], "import circles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_web_side_modules_never_import_the_worker_side() -> None:
    """Statically, not just on the CPU path the subprocess test takes: no module outside gpu_worker/ and model/
    imports them, except the spawn target in engine.client (a lazy import that runs in the child process)."""
    graph = _graph()
    allowed = {("realtime_tts.engine.client", "realtime_tts.gpu_worker.loop")}
    bad = sorted((src, dst) for src, dsts in graph.items() if not src.startswith(WORKER_SIDE)
                 for dst in dsts if dst.startswith(WORKER_SIDE) and (src, dst) not in allowed)
    assert bad == [], f"web-side modules importing worker-side ones: {bad}"
