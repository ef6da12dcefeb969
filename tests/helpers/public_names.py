"""An import-linter contract (``make lint``): a package may import, of the library, only the
names its public modules export in ``__all__``.

import-linter's own contracts see modules, not names: ``from pgenough.core import first_line``
and ``from pgenough.core import _sql`` import the same module. This reads the source of every
module of ``source_package`` (lazy imports inside functions included) and of each public
module (its literal ``__all__``), so nothing is imported to check it.

Options: ``source_package`` (the application, ``pgenough_plans``) and ``public_modules`` (the
library's modules it may import from; any other module of the library is refused).
"""

from __future__ import annotations

import ast
import importlib.util
from dataclasses import dataclass
from pathlib import Path

import grimp
from importlinter.application import output
from importlinter.domain import fields
from importlinter.domain.contract import Contract, ContractCheck

LIBRARY = "pgenough"


@dataclass(frozen=True)
class Violation:
    importer: str
    line: int
    imported: str
    name: str | None
    """The name imported from ``imported``; None when the module itself is not public."""

    def __str__(self) -> str:
        where = f"{self.importer}:{self.line}"
        if self.name is None:
            return f"{where} imports {self.imported}, which is not a public module of pgenough"
        return f"{where} imports {self.name} from {self.imported}, which is not in its __all__"


def _source(module: str) -> Path | None:
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
        return None
    return Path(spec.origin)


def exported(module: str) -> frozenset[str]:
    """The names of ``module``'s literal ``__all__`` (none without one)."""
    path = _source(module)
    if path is None:
        return frozenset()
    for node in ast.parse(path.read_text("utf-8")).body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        if isinstance(target, ast.Name) and target.id == "__all__" and node.value is not None:
            value = ast.literal_eval(node.value)
            return frozenset(str(v) for v in value)
    return frozenset()


def _ours(module: str) -> bool:
    return module == LIBRARY or module.startswith(LIBRARY + ".")


def violations(modules: set[str], public: set[str]) -> list[Violation]:
    """Every import of the library by ``modules`` that ``public`` does not allow."""
    found: list[Violation] = []
    names = {m: exported(m) for m in public}
    for importer in sorted(modules):
        path = _source(importer)
        if path is None:
            continue
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if _ours(alias.name) and alias.name not in public:
                        found.append(Violation(importer, node.lineno, alias.name, None))
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                if not _ours(node.module):
                    continue
                if node.module not in public:
                    found.append(Violation(importer, node.lineno, node.module, None))
                    continue
                for alias in node.names:
                    submodule = f"{node.module}.{alias.name}"
                    if alias.name not in names[node.module] and submodule not in public:
                        found.append(Violation(importer, node.lineno, node.module, alias.name))
    return found


class PublicNamesContract(Contract):
    type_name = "public_names"

    source_package = fields.StringField()
    public_modules = fields.ListField(subfield=fields.StringField())

    def check(self, graph: grimp.ImportGraph, verbose: bool) -> ContractCheck:
        package = str(self.source_package)
        modules = {package} | graph.find_descendants(package)
        found = violations(modules, {str(m) for m in self.public_modules})  # type: ignore[attr-defined]
        return ContractCheck(kept=not found, metadata={"violations": found})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for violation in check.metadata["violations"]:
            output.print_error(str(violation), bold=False)
            output.new_line()
