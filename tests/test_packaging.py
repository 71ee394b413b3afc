"""What a release carries: the sdist holds the package, its tests, the docs' text and the
licence, and not the console's screenshot or the benchmarks (scripts for this repository's
machines, and their measured figures); the metadata names the licence and the project's URLs."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def sdist_names(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    from hatchling.builders.sdist import SdistBuilder

    out = tmp_path_factory.mktemp("sdist")
    (built,) = SdistBuilder(str(ROOT)).build(directory=str(out))
    with tarfile.open(built) as archive:
        return [name.split("/", 1)[1] for name in archive.getnames() if "/" in name]


def test_the_sdist_leaves_out_the_screenshot_and_the_benchmarks(sdist_names: list[str]) -> None:
    assert [name for name in sdist_names if name.endswith(".png")] == []
    assert [name for name in sdist_names if name.startswith("bench/")] == []
    assert [name for name in sdist_names if name.startswith((".fiduciary/", "site/"))] == []


def test_the_sdist_holds_the_package_the_licence_and_the_docs(sdist_names: list[str]) -> None:
    for needed in (
        "LICENSE",
        "README.md",
        "pyproject.toml",
        "src/fiduciary/__init__.py",
        "src/fiduciary/py.typed",
        "docs/events.md",
        "mkdocs.yml",
    ):
        assert needed in sdist_names


def test_the_metadata_names_the_licence_and_no_invented_urls() -> None:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["license"] == "MIT"
    assert "MIT License" in (ROOT / "LICENSE").read_text(encoding="utf-8")
    # no public address yet: urls must not point at a guess (add them with the real one)
    assert "urls" not in project
    assert "Typing :: Typed" in project["classifiers"]
