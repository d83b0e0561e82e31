"""Every public item of the SDK is documented: each module, each public
class and function, each public method and property of a public class,
and each public constant (a `#:` comment just above it). Read from the
source, so the component-only modules are checked too."""

import ast
from pathlib import Path

SDK = Path(__file__).resolve().parents[1] / "leasehold"


def undocumented(source: str) -> list:
    """The public items of `source` that lack their documentation, as `line: name`."""
    tree = ast.parse(source)
    lines = source.splitlines()
    missing = []
    if ast.get_docstring(tree) is None:
        missing.append("1: module")

    def check_function(node, owner=""):
        if node.name.startswith("_"):
            return
        if ast.get_docstring(node) is None:
            missing.append(f"{node.lineno}: {owner}{node.name}")

    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            check_function(node)
        elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            if ast.get_docstring(node) is None:
                missing.append(f"{node.lineno}: {node.name}")
            for member in node.body:
                if isinstance(member, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    check_function(member, f"{node.name}.")
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [t.id for t in targets if isinstance(t, ast.Name)]
            value = node.value
            is_typevar = (
                isinstance(value, ast.Call)
                and isinstance(value.func, ast.Name)
                and value.func.id == "TypeVar"
            )
            for name in names:
                if name.startswith("_") or name == "__all__" or is_typevar:
                    continue
                above = lines[node.lineno - 2].strip() if node.lineno > 1 else ""
                if not above.startswith("#:"):
                    missing.append(f"{node.lineno}: {name}")
    return missing


def test_every_public_item_of_the_sdk_is_documented():
    files = sorted(SDK.glob("*.py"))
    assert len(files) >= 20
    missing = []
    for path in files:
        missing += [f"{path.name}:{m}" for m in undocumented(path.read_text(encoding="utf-8"))]
    assert missing == []


def test_the_check_finds_what_is_undocumented():
    source = '''"""M."""

#: A.
A = 1
B = 2


def f():
    """F."""


def g():
    pass


class C:
    """C."""

    def m(self):
        """M."""

    def n(self):
        pass

    def _private(self):
        pass


class D:
    pass
'''
    assert undocumented(source) == ["5: B", "12: g", "22: C.n", "29: D"]
    assert undocumented("x = 1\n") == ["1: module", "1: x"]
