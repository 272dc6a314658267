"""Versioned docs: two local tags in a temp clone, built by ``hooks/versions.py``."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from docs_support import ROOT, SITE_PREFIX, build_env, parse_html

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

TAGS = ("v0.0.1", "v0.0.2")
VERSIONS = ["main", "v0.0.2", "v0.0.1"]  # the branch first, then the tags newest first


@pytest.fixture(scope="module")
def versioned_site(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A clone of the committed tree with two tags, and every version of its site."""
    tmp = tmp_path_factory.mktemp("versions")
    repo, site = tmp / "repo", tmp / "site"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(repo)], check=True)
    # Each version's CLI says which version it is: v0.0.1 as cloned, then one commit
    # for v0.0.2 and one more for the branch.
    for version in VERSIONS[::-1]:
        if version != TAGS[0]:
            _mark_cli(repo, version)
        if version != "main":
            subprocess.run(["git", "-C", str(repo), "tag", version], check=True)
    done = subprocess.run(
        [sys.executable, str(repo / "hooks" / "versions.py"), str(site), "--fast"],
        cwd=repo,
        env=build_env(),
        capture_output=True,
        text=True,
        timeout=1700,
        check=False,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    return repo, site


CLI_HELP = "Keep LLM-agent runs trustworthy: inspect journals, run and resume agents."
CLI_SOURCE = Path("src/steadyloop/cli/__init__.py")


def _marker(version: str) -> str:
    return f"cli-of-{version.replace('.', '-')}"


def _mark_cli(repo: Path, version: str) -> None:
    """Commit a CLI help text in ``repo`` that names ``version``."""
    source = repo / CLI_SOURCE
    text = source.read_text(encoding="utf-8")
    text = re.sub(
        re.escape(CLI_HELP[:-1]) + r"(?: cli-of-\S+)?\.",
        CLI_HELP[:-1] + f" {_marker(version)}.",
        text,
    )
    assert _marker(version) in text, "the CLI's help text moved: update CLI_HELP"
    source.write_text(text, encoding="utf-8")
    git = ["git", "-C", str(repo), "-c", "user.name=docs test", "-c", "user.email=docs@test"]
    subprocess.run([*git, "commit", "--quiet", "-am", f"CLI help of {version}"], check=True)


def _home(site: Path, version: str, lang: str) -> Path:
    folder = site if version == "main" else site / version
    return (folder / "zh" if lang == "zh" else folder) / "index.html"


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_every_version_lists_every_version_and_marks_its_own(
    versioned_site: tuple[Path, Path], lang: str
) -> None:
    """Each version's pages offer every version, newest first, each link to a built page."""
    _repo, site = versioned_site
    for version in VERSIONS:
        page = _home(site, version, lang)
        selector = [n for n in parse_html(page).find_all("nav", "steadyloop-versions")]
        assert len(selector) == 1, page
        shown = [n.text().strip() for n in selector[0].iter() if n.tag in {"a", "strong"}]
        assert shown == VERSIONS, (version, shown)
        current = [n.text().strip() for n in selector[0].find_all("strong")]
        assert current == [version]
        for link in selector[0].find_all("a"):
            href = link.attrs["href"]
            assert href.startswith(SITE_PREFIX), href
            target = site / href.removeprefix(SITE_PREFIX) / "index.html"
            assert target.is_file(), href
            assert target == _home(site, link.text().strip(), lang)


def test_a_tag_is_built_from_its_own_commit_at_its_own_address(
    versioned_site: tuple[Path, Path],
) -> None:
    """A tag's pages name their own address and link source at the tag's commit."""
    repo, site = versioned_site
    commit = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", f"{TAGS[0]}^{{commit}}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    page = parse_html(site / TAGS[0] / "reference" / "api" / "journal" / "index.html")
    canonical = [
        n.attrs["href"] for n in page.find_all("link") if n.attrs.get("rel") == "canonical"
    ]
    assert canonical and canonical[0].endswith(f"{SITE_PREFIX}{TAGS[0]}/reference/api/journal/")
    sources = [a.attrs["href"] for a in page.find_all("a") if "steadyloop-source-link" in a.classes]
    assert sources and all(f"/blob/{commit}/" in s for s in sources)
    assert (site / TAGS[0] / "llms.txt").is_file() and (site / "llms.txt").is_file()


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_each_versions_cli_page_comes_from_its_own_source(
    versioned_site: tuple[Path, Path], lang: str
) -> None:
    """A version's CLI reference shows that version's CLI, never the installed package's."""
    _repo, site = versioned_site
    for version in VERSIONS:
        folder = site if version == "main" else site / version
        page = (folder / "zh" if lang == "zh" else folder) / "reference" / "cli" / "index.html"
        text = page.read_text(encoding="utf-8")
        shown = {v for v in VERSIONS if _marker(v) in text}
        expected = set() if version == TAGS[0] else {version}
        assert shown == expected, (version, shown)
        assert CLI_HELP[:-1] in text, page
