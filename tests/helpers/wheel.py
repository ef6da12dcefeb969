"""The release as a user gets it: ``python -m build`` of this checkout's two distributions
(for each, the sdist, then the wheel built from that sdist): the library, pgenough, installed
with no extras into a fresh virtual environment (what ``pip install .`` gives), and
the plan service, pgenough-plans, installed with the library's wheel into another.

Building and installing take most of the packaging tests' time, so both are done once per
state of the sources, under .pgenough-test/packaging/<digest>/, and reused by every test
module, every xdist worker and CI's second pass (a file lock makes the others wait while the
first builds). A test module imports the fixtures it uses (``release_fixture``...): they
register under their names (``release``...). tests/test_packaging.py checks the artefacts;
tests/test_examples.py runs the core-only examples in the environment.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from filelock import FileLock

from pgenough.core.db import create_database, drop_database, with_database
from tests.helpers.procs import ROOT

INSTALL_TIMEOUT = 600
"""Seconds for building or installing: pip may fetch the core's dependencies from the
registry when its cache lacks them."""
PACKAGING_CACHE = ROOT / ".pgenough-test" / "packaging"
SOURCES = (
    "pyproject.toml",
    "README.md",
    "LICENSE",
    "src",
    "examples",
    "plan-service/pyproject.toml",
    "plan-service/README.md",
    "plan-service/src",
)
"""What the sdists are made of (each pyproject.toml's [tool.hatch.build.targets.sdist]): a
change to any of them is a new build."""
PLAN_SERVICE = ROOT / "plan-service"


@dataclass(frozen=True)
class Release:
    sdist: Path
    wheel: Path
    build_log: str
    """``python -m build``'s output: it says what each artefact was built from."""
    plans_sdist: Path
    plans_wheel: Path


@dataclass(frozen=True)
class CoreVenv:
    bin: Path
    cwd: Path
    """A directory without a ``pgenough.toml``, to run in."""
    env: dict[str, str]
    """This process's environment without pgenough's settings or Python paths."""

    def run(
        self,
        *args: str | Path,
        env: dict[str, str] | None = None,
        timeout: float = 120,
        cwd: Path | None = None,
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(a) for a in args],
            cwd=cwd or self.cwd,
            env=self.env if env is None else env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def python(self, *args: str | Path) -> subprocess.CompletedProcess[str]:
        return self.run(self.bin / "python", *args)

    def pgenough(
        self, *args: str, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return self.run(self.bin / "pgenough", *args, env=env)

    def plans(
        self, *args: str, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return self.run(self.bin / "pgenough-plans", *args, env=env)


def clean_env() -> dict[str, str]:
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.upper().startswith("PGENOUGH_")
        and name.upper() not in {"DATABASE_URL", "PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME"}
    }
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def check(result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode == 0, f"{result.args}:\n{result.stdout}\n{result.stderr}"


def sources_key() -> str:
    """A digest of what the release is built from."""
    digest = hashlib.blake2b(digest_size=8)
    files: list[Path] = []
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            files += [p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
        elif path.is_file():
            files.append(path)
    for path in sorted(files):
        digest.update(str(path.relative_to(ROOT)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _built(cache: Path) -> None:
    """Build the sdist and the wheel into ``cache``/dist, and install the wheel into
    ``cache``/venv."""
    env = clean_env()

    def run(*args: str | Path) -> str:
        result = subprocess.run(
            [str(a) for a in args],
            cwd=cache,
            env=env,
            capture_output=True,
            text=True,
            timeout=INSTALL_TIMEOUT,
        )
        check(result)
        return result.stdout + result.stderr

    # Without build isolation, hatchling is the test environment's (the test extra holds the
    # one [build-system] names): an isolated build would install it twice (for the sdist and
    # for the wheel) on every run of CI. Without --sdist or --wheel, `build` makes the sdist
    # and then the wheel *from the sdist*, so the wheel proves the sdist complete.
    log = run(sys.executable, "-m", "build", "--no-isolation", "--outdir", cache / "dist", ROOT)
    (cache / "build.log").write_text(log)
    plans = cache / "plans-dist"
    log = run(sys.executable, "-m", "build", "--no-isolation", "--outdir", plans, PLAN_SERVICE)
    (cache / "plans-build.log").write_text(log)
    [wheel] = (cache / "dist").glob("pgenough-*.whl")
    run(sys.executable, "-m", "venv", cache / "venv")
    run(cache / "venv" / "bin" / "python", "-m", "pip", "install", "--quiet", wheel)


def _plans_venv(cache: Path) -> Path:
    """The plan service's wheel installed with this checkout's pgenough wheel (not one from
    the index) into ``cache``/plans-venv, made once."""
    venv = cache / "plans-venv"
    with FileLock(cache / "plans-venv.lock"):
        if not (venv / "ready").exists():
            shutil.rmtree(venv, ignore_errors=True)
            env = clean_env()
            for args in (
                [sys.executable, "-m", "venv", venv],
                [
                    venv / "bin" / "python",
                    "-m",
                    "pip",
                    "install",
                    "--quiet",
                    "--find-links",
                    cache / "dist",
                    *(cache / "plans-dist").glob("pgenough_plans-*.whl"),
                ],
            ):
                check(
                    subprocess.run(
                        [str(a) for a in args],
                        cwd=cache,
                        env=env,
                        capture_output=True,
                        text=True,
                        timeout=INSTALL_TIMEOUT,
                    )
                )
            (venv / "ready").touch()
    return venv


def release_dir() -> Path:
    """The cache directory of this state of the sources, built if it was not."""
    return built_once(PACKAGING_CACHE, sources_key(), _built)


def built_once(root: Path, key: str, build: Callable[[Path], None]) -> Path:
    """``root``/``key``, made by ``build`` (into that new directory) unless a finished one is
    there. Under a file lock: the xdist workers and CI's second pass wait for the first, and
    reuse what it made; older keys' directories are removed, of no more use."""
    cache = root / key
    root.mkdir(parents=True, exist_ok=True)
    with FileLock(root / "build.lock"):
        if not (cache / "ready").exists():
            for old in root.iterdir():
                if old.is_dir():
                    shutil.rmtree(old)
            cache.mkdir()
            build(cache)
            (cache / "ready").touch()
    return cache


@pytest.fixture(scope="session", name="release")
def release_fixture() -> Release:
    cache = release_dir()
    [sdist] = (cache / "dist").glob("pgenough-*.tar.gz")
    [wheel] = (cache / "dist").glob("pgenough-*.whl")
    [plans_sdist] = (cache / "plans-dist").glob("pgenough_plans-*.tar.gz")
    [plans_wheel] = (cache / "plans-dist").glob("pgenough_plans-*.whl")
    return Release(
        sdist=sdist,
        wheel=wheel,
        build_log=(cache / "build.log").read_text(),
        plans_sdist=plans_sdist,
        plans_wheel=plans_wheel,
    )


@pytest.fixture(scope="session", name="core_venv")
def core_venv_fixture(tmp_path_factory: pytest.TempPathFactory) -> CoreVenv:
    """The wheel of this checkout, installed with no extras into a new virtual environment."""
    cache = release_dir()
    # The tests write their modules into the working directory: one per process.
    return CoreVenv(
        bin=cache / "venv" / "bin", cwd=tmp_path_factory.mktemp("packaging"), env=clean_env()
    )


@pytest.fixture(scope="session", name="plans_venv")
def plans_venv_fixture(tmp_path_factory: pytest.TempPathFactory) -> CoreVenv:
    """The plan service's wheel and this checkout's pgenough wheel, in a new environment."""
    venv = _plans_venv(release_dir())
    return CoreVenv(bin=venv / "bin", cwd=tmp_path_factory.mktemp("plans"), env=clean_env())


@pytest.fixture(scope="module", name="core_db")
def core_db_fixture(server_url: str) -> Iterator[str]:
    """A database of its own on this run's server, never migrated by anything else: the
    session's test database carries the plan service's tables, and the core alone must
    never create them."""
    name = f"pgenough_pkg_{uuid.uuid4().hex[:10]}"
    create_database(server_url, name)
    try:
        yield with_database(server_url, name)
    finally:
        drop_database(server_url, name)
