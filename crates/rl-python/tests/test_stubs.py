"""The type stubs describe the extension module exactly (names, not signatures)."""

import ast
import importlib.resources

import flatrl
from flatrl import _flatrl


def stub_classes():
    source = importlib.resources.files("flatrl").joinpath("_flatrl.pyi").read_text()
    classes = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.ClassDef):
            classes[node.name] = {
                item.name if isinstance(item, ast.FunctionDef) else item.target.id
                for item in node.body
                if isinstance(item, ast.FunctionDef) or (isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name))
            }
    return classes


def test_the_wheel_ships_stubs_and_py_typed():
    files = importlib.resources.files("flatrl")
    assert files.joinpath("py.typed").is_file()
    assert files.joinpath("_flatrl.pyi").is_file()


def test_stubs_match_the_module():
    classes = stub_classes()
    runtime = {name for name in dir(_flatrl) if isinstance(getattr(_flatrl, name), type)}
    assert set(classes) == runtime
    for name, members in classes.items():
        cls = getattr(_flatrl, name)
        public = {m for m in dir(cls) if not m.startswith("_")}
        if issubclass(cls, BaseException):
            # Attributes of raised instances (`plan`): checked in test_replay.
            public -= set(dir(BaseException))
            members = members - {"plan"}
        declared = {m for m in members if not m.startswith("_") or m in ("__init__",)}
        assert public == declared - {"__init__"}, name
        for dunder in members - declared:
            assert hasattr(cls, dunder), f"{name}.{dunder}"


def test_package_exports():
    for name in flatrl.__all__:
        assert getattr(flatrl, name) is not None, name
