"""A non-editable install ships every file the code reads: the wheel holds all package data.

Editable installs read templates, prompts and rates straight from the checkout, so a gap in
pyproject's package data shows only in a wheel or an image (`TemplateNotFound` at review time).
`.ci/run` also installs the wheel into a fresh venv and runs `cockpit demo` with it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("bot", "handlers", "templates")


def source_files() -> list[str]:
    """The packages' files as a clean clone would have them (tracked or new, not ignored)."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "--", *PACKAGES],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    return sorted(name for name in listed if (ROOT / name).is_file())


@pytest.fixture(scope="module")
def wheel_names(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    # Built from a copy: a stale build/ folder in the checkout could hide a missing file.
    work = tmp_path_factory.mktemp("wheel")
    source = work / "src"
    for name in ["pyproject.toml", "README.md", *source_files()]:
        target = source / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, target)
    pip_wheel = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
    subprocess.run(
        [*pip_wheel, "--no-index", "-w", str(work / "dist"), str(source)],
        capture_output=True,
        check=True,
        timeout=300,
    )
    [wheel] = (work / "dist").glob("pr_cockpit-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        return set(archive.namelist())


def test_wheel_ships_every_file_of_the_packages(wheel_names: set[str]) -> None:
    missing = [name for name in source_files() if name not in wheel_names]
    assert not missing, f"pyproject's package data leaves these out of the wheel: {missing}"


@pytest.mark.parametrize(
    "name",
    [
        "templates/prompts/review_request.md.j2",
        "templates/prompts/review.md",
        "templates/status.md.j2",
        "bot/agents/rates.json",
        "bot/web/static/cockpit.css",
        "templates/web/inbox.html.j2",
    ],
)
def test_wheel_holds_the_files_reviews_and_registration_read(
    wheel_names: set[str], name: str
) -> None:
    assert name in wheel_names


def test_wheel_carries_no_bytecode(wheel_names: set[str]) -> None:
    assert not [n for n in wheel_names if "__pycache__" in n or n.endswith(".pyc")]
