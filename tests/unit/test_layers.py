"""The layers of DESIGN.md, read from the code: every module under src/floeline has a
layer, imports only from its own layer or below, and no two packages (nor two modules
of one package) import each other, directly or round a circle.

Every import counts: module-level ones, those inside functions (a lazy import is an
import: it hides a circle, it does not remove it), `from . import x`. Run this file
directly (`python tests/unit/test_layers.py`) to print every broken import at once.
No Spark, no floeline import: the modules are read with `ast`."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
ROOT = "floeline"

BASE, RECORDS, SOURCES, WAREHOUSE, INGEST, SQL, OPS, DEV, CLI = range(9)
LAYER_NAMES = {BASE: "base (errors, config, naming)", RECORDS: "records", SOURCES: "sources",
               WAREHOUSE: "warehouse", INGEST: "ingest", SQL: "sql", OPS: "ops/worker",
               DEV: "dev tooling", CLI: "cli"}

# Every module's layer. A name covers its module and, for a package, every module in it,
# so a module moving inside a package (records/transforms.py -> records/transforms/,
# sources/kinesis*.py -> sources/kinesis/) needs no change here; the longest name wins.
# A new module outside these names fails test_every_module_has_a_layer: give it one.
LAYERS = {
    ROOT: BASE,  # floeline/__init__.py only (its version)
    "floeline.errors": BASE,
    "floeline.config": BASE,
    "floeline.naming": BASE,
    "floeline.retry": BASE,
    "floeline.waits": BASE,  # what each connector waits for; retry.call reports to it
    "floeline.secrets": BASE,
    # The Python client of the worker's Snowpipe Streaming channels: an application's
    # import, so it imports nothing of floeline (and no PySpark).
    "floeline.streaming": BASE,
    "floeline.secret_references": BASE,
    "floeline.cache": BASE,  # where downloaded jars and builds are kept; install-once
    "floeline.class_archive": BASE,  # Spark's JVM class archive: named, used, recorded
    "floeline.processes": BASE,
    "floeline.signals": BASE,  # SIGINT/SIGTERM -> stop after the batch, for entry points  # reading a process's command line, pid files, log tails
    # The process-wide clock from launch to first commit: imports nothing of floeline;
    # spark.py, warehouse/tables.py and the connector mark their parts on it.
    "floeline.startup": BASE,
    "floeline.resources": BASE,  # data files (Java sources, poms) and no imports
    "floeline.records": RECORDS,
    "floeline.sources": SOURCES,
    # The SparkSession builder and floeline's JVM function: product modules the ingest
    # path uses (onepass calls jvm's function); they know Spark, not tables.
    "floeline.spark": SOURCES,
    "floeline.jvm": SOURCES,
    "floeline.warehouse": WAREHOUSE,
    "floeline.ingest": INGEST,
    "floeline.sql": SQL,
    "floeline.ops": OPS,
    "floeline.worker": OPS,
    # Local broker, registry, AWS endpoints, cluster: for demo, tests and benchmarks;
    # just below the CLI, so no product module (anything below the CLI) may import them.
    "floeline.dev": DEV,
    "floeline.cli": CLI,
    "floeline.command_help": CLI,  # what `floeline <command> --help` says after the arguments
    "floeline.demo": CLI,
    "floeline.submit": CLI,
}

# The nodes of the package graph: these packages; any other module is its own node.
PACKAGES = ("records", "sources", "warehouse", "ingest", "sql", "ops", "worker", "dev", "config")


@dataclass(frozen=True)
class Import:
    importer: str  # module name, floeline.x.y
    imported: str
    line: int

    def where(self) -> str:
        return f"{self.importer} (line {self.line}) imports {self.imported}"


def module_files(src: Path = SRC) -> dict[str, Path]:
    """Module name -> file, for every .py under src/floeline (a package is its __init__)."""
    found = {}
    for path in sorted((src / ROOT).rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def imports_of(name: str, path: Path, modules: set[str]) -> list[Import]:
    """Every floeline import in the module, wherever it is (functions, classes,
    if-blocks), relative ones resolved. `from pkg import x` imports the module pkg.x when
    there is one, else pkg."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [Import(name, a.name, node.lineno) for a in node.names
                      if a.name == ROOT or a.name.startswith(ROOT + ".")]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            if source != ROOT and not source.startswith(ROOT + "."):
                continue
            for alias in node.names:
                child = f"{source}.{alias.name}"
                found.append(Import(name, child if child in modules else source, node.lineno))
    return sorted({i for i in found if i.imported != name}, key=lambda i: (i.line, i.imported))


def all_imports(src: Path = SRC) -> tuple[dict[str, Path], list[Import]]:
    files = module_files(src)
    modules = set(files)
    return files, [i for name, path in files.items() for i in imports_of(name, path, modules)]


def layer_of(module: str) -> int | None:
    """The layer of the longest LAYERS name covering the module (the root covers itself only)."""
    best = None
    for name, layer in LAYERS.items():
        covers = module == name or (name != ROOT and module.startswith(name + "."))
        if covers and (best is None or len(name) > len(best[0])):
            best = (name, layer)
    return best[1] if best else None


def describe(module: str) -> str:
    layer = layer_of(module)
    return f"{module} [{layer}: {LAYER_NAMES.get(layer, 'no layer')}]"


def node_of(module: str) -> str:
    """The module's node in the package graph: its package, or the module itself."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in PACKAGES else module


def unlayered_modules(src: Path = SRC) -> list[str]:
    return [f"{m}: give it a layer (LAYERS in tests/unit/test_layers.py)"
            for m in module_files(src) if layer_of(m) is None]


def upward_imports(src: Path = SRC) -> list[str]:
    _, imports = all_imports(src)
    return [f"{i.where()}: {describe(i.importer)} imports the higher {describe(i.imported)}"
            for i in imports
            if layer_of(i.importer) is not None and layer_of(i.imported) is not None
            and layer_of(i.imported) > layer_of(i.importer)]


def _circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for after in sorted(edges.get(node, ())):
            if after not in index:
                visit(after)
                low[node] = min(low[node], low[after])
            elif after in on_stack:
                low[node] = min(low[node], index[after])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return sorted(found)


def _circle_report(kind: str, imports: list[Import], node) -> list[str]:
    edges: dict[str, set[str]] = {}
    for i in imports:
        a, b = node(i.importer), node(i.imported)
        if a != b:
            edges.setdefault(a, set()).add(b)
    out = []
    for circle in _circles(edges):
        members = set(circle)
        inside = [i for i in sorted(imports, key=lambda i: (i.importer, i.line, i.imported))
                  if node(i.importer) in members and node(i.imported) in members
                  and node(i.importer) != node(i.imported)]
        # The imports that do not go down a layer close the circle: break one of them.
        against = [i for i in inside if layer_of(i.imported) >= layer_of(i.importer)]
        out.append(f"{kind} circle {' <-> '.join(circle)}, closed by:")
        out += [f"    {i.where()}: {describe(i.importer)} -> {describe(i.imported)}" for i in against]
    return out


def package_circles(src: Path = SRC) -> list[str]:
    """Circles between packages (records, sources, ..., config; other modules are nodes
    of their own)."""
    _, imports = all_imports(src)
    return _circle_report("package", imports, node_of)


def module_circles(src: Path = SRC) -> list[str]:
    """Circles between the modules of one package (sql.copy <-> sql.ddl, ...)."""
    _, imports = all_imports(src)
    inside = [i for i in imports
              if node_of(i.importer) == node_of(i.imported) and node_of(i.importer) in PACKAGES]
    return _circle_report("module", inside, lambda m: m)


def all_violations(src: Path = SRC) -> list[str]:
    """Every broken rule, for the next engineer to see at once."""
    return unlayered_modules(src) + upward_imports(src) + package_circles(src) + module_circles(src)


def _listing(problems: list[str]) -> str:
    return f"{len(problems)} found:\n" + "\n".join(problems)


@pytest.mark.parametrize("find_problems", [
    pytest.param(unlayered_modules, id="every module has a layer"),
    pytest.param(upward_imports, id="no module imports a higher layer"),
    pytest.param(package_circles, id="no circles between packages"),
    pytest.param(module_circles, id="no circles between the modules of a package"),
])
def test_the_layers_hold(find_problems):
    problems = find_problems()
    assert not problems, _listing(problems)


# ---- the checker itself, on a small made-up tree -------------------------------------

def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / ROOT / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def test_the_checker_finds_lazy_relative_and_upward_imports(tmp_path):
    src = _tree(tmp_path, {
        "__init__.py": "",
        "sql/__init__.py": "",
        "sql/a.py": "def f():\n    from . import b\n",
        "sql/b.py": "from floeline.sql.a import f\n",
        "records/__init__.py": "",
        "records/x.py": "def g():\n    from floeline.ingest import y\n",
        "ingest/__init__.py": "",
        "ingest/y.py": "import floeline.records.x\n",
        "mystery.py": "",
    })
    assert unlayered_modules(src) == ["floeline.mystery: give it a layer (LAYERS in tests/unit/test_layers.py)"]
    (upward,) = upward_imports(src)
    assert upward.startswith("floeline.records.x (line 2) imports floeline.ingest.y")
    assert "[1: records]" in upward and "[4: ingest]" in upward
    assert package_circles(src) == [
        "package circle ingest <-> records, closed by:",
        "    floeline.records.x (line 2) imports floeline.ingest.y: floeline.records.x [1: records] -> "
        "floeline.ingest.y [4: ingest]"]
    assert module_circles(src) == [
        "module circle floeline.sql.a <-> floeline.sql.b, closed by:",
        "    floeline.sql.a (line 2) imports floeline.sql.b: floeline.sql.a [5: sql] -> floeline.sql.b [5: sql]",
        "    floeline.sql.b (line 1) imports floeline.sql.a: floeline.sql.b [5: sql] -> floeline.sql.a [5: sql]"]


if __name__ == "__main__":
    found = all_violations()
    print(_listing(found) if found else "no layer violations")
