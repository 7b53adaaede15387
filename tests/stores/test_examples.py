"""The runnable examples run, use only kvprobe's public names, and encode keys one way.

Only the examples that need no network server are run here (the object store
example starts its own moto server and is covered by the S3 integration
tests; examples/vllm_tier.py is run by tests/engine/test_vllm_fs_tier.py).
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SCRIPTS = sorted(EXAMPLES.glob("*.py"))


@pytest.mark.parametrize("script", ["fs_tier.py", "process_tier.py"])
def test_example_scheduler_loop_finishes_clean(script: str, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, script, str(tmp_path / "tier")],
        cwd=EXAMPLES,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("scheduled") == 8, done.stdout
    assert "states held: 0;" in done.stdout
    assert "backend_errors=0" in done.stdout and "hits=0," not in done.stdout


#: Runs an example with the ``s3`` extra's packages hidden, as on an install without it.
_WITHOUT_S3_EXTRA = """
import importlib.abc, runpy, sys
class Hidden(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("boto3", "botocore", "moto"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, Hidden())
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


@pytest.mark.parametrize("args", [[], ["http://127.0.0.1:9", "kvprobe-example"]], ids=["local-server", "url-bucket"])
def test_object_store_example_names_the_s3_extra_when_it_is_missing(args: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT_S3_EXTRA, "nixl_obj_tier.py", *args],
        cwd=EXAMPLES,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode != 0
    assert "pip install 'kvprobe[s3]'" in done.stderr, done.stderr[-2000:]
    assert "Traceback" not in done.stderr, done.stderr[-2000:]


def kvprobe_imports(tree: ast.AST) -> list[tuple[str, str | None]]:
    """Every (module, name) a module imports from kvprobe; name None for ``import kvprobe.x``."""
    found: list[tuple[str, str | None]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "kvprobe":
            found += [(node.module, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(alias.name, None) for alias in node.names if alias.name.split(".")[0] == "kvprobe"]
    return found


@pytest.mark.parametrize("script", SCRIPTS, ids=[s.name for s in SCRIPTS])
def test_examples_use_public_names_only(script: Path) -> None:
    imports = kvprobe_imports(ast.parse(script.read_text()))
    for module, name in imports:
        assert not any(part.startswith("_") for part in module.split(".")), f"{script.name}: private module {module}"
        if name is not None:
            public = getattr(importlib.import_module(module), "__all__", ())
            assert name in public, f"{script.name}: {module}.{name} is not in {module}.__all__"


def test_every_example_imports_kvprobe() -> None:
    # The public-names check above means something only if each example does import kvprobe.
    assert [s.name for s in SCRIPTS if not kvprobe_imports(ast.parse(s.read_text()))] == []


def test_examples_encode_keys_one_way() -> None:
    """One key encoding: every example builds its keys with _scheduler.block_key (vLLM's layout)."""
    encoders = []
    for script in SCRIPTS:
        tree = ast.parse(script.read_text())
        enclosing = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                if node.func.attr in ("to_bytes", "from_bytes"):
                    scope: ast.AST = node
                    while scope in enclosing and not isinstance(scope, ast.FunctionDef):
                        scope = enclosing[scope]
                    where = scope.name if isinstance(scope, ast.FunctionDef) else "<module>"
                    encoders.append((script.name, where, ast.unparse(node)))
    assert encoders == [("_scheduler.py", "block_key", "group.to_bytes(4, 'big')")]
