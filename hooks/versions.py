"""Versioned docs: every git tag built into ``/<tag>/``, the branch at the root, a selector.

Run ``uv run python hooks/versions.py SITE [--fast]`` from a clone with its tags. It
builds the checked-out tree into ``SITE/`` (the version ``main``) and each tag
``v<version>`` into ``SITE/<tag>/``, from a git worktree of that tag, newest first.
Every build is told the whole list (``STEADYLOOP_DOCS_VERSIONS``, JSON) and its own
entry (``STEADYLOOP_DOCS_VERSION``); as an MkDocs hook this module then moves the
build's ``site_url`` below the version's folder and hands the list to the header's
version selector (``overrides/partials/header.html``), which is plain links drawn at
build time: the selector fetches nothing, unlike mike's ``versions.json``. A build
without those variables (``mkdocs build``, ``mkdocs serve``) has no selector.

Each version is built from its own source: the build, and every notebook it executes,
runs with ``PYTHONPATH`` set to that tree's ``src/``, so the pages generated from the
code (the CLI reference, the error classes, the record kinds, the JSON Schemas) are the
tag's, not the installed package's. The toolchain (MkDocs, its plugins, nbmake) is the
one this command runs in.

Without ``--fast`` each tree's notebooks are executed first, through nbmake in that tree
(``python -m pytest notebooks``, which skips every notebook that already has a current
executed copy), into that tree's own cache, and the strict build renders those copies.
``--fast`` executes nothing and builds with ``STEADYLOOP_DOCS_FAST=1`` (notebooks shown
without outputs, see ``hooks/notebook_cache.py``). A tag whose tree predates this module
is built as it was and shows no selector; the others list it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BRANCH_VERSION = "main"
TAG = re.compile(r"^v(\d+)\.(\d+)\.(\d+)$")

_VERSION_ENV = "STEADYLOOP_DOCS_VERSION"
_VERSIONS_ENV = "STEADYLOOP_DOCS_VERSIONS"
_first_site_url: dict[str, str] = {}


def tags(repo: Path) -> list[str]:
    """The release tags (``vX.Y.Z``) of ``repo``, newest first."""
    out = subprocess.run(
        ["git", "-C", str(repo), "tag", "--list", "v*"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    releases = [t for t in out if TAG.match(t)]
    return sorted(
        releases, key=lambda t: tuple(int(n) for n in TAG.match(t).groups()), reverse=True
    )  # type: ignore[union-attr]


def folder(version: str) -> str:
    """Where a version lives below the site root: the branch at the root, a tag in its own."""
    return "" if version == BRANCH_VERSION else f"{version}/"


# -- as an MkDocs hook --------------------------------------------------------------------


def on_config(config: Any) -> Any:
    """Put this build below its version's folder and give the header the version list."""
    version = os.environ.get(_VERSION_ENV)
    listed = os.environ.get(_VERSIONS_ENV)
    if not version or not listed:
        return config
    versions = json.loads(listed)
    if version not in versions:
        raise ValueError(f"{_VERSION_ENV}={version!r} is not in {_VERSIONS_ENV} ({versions})")
    # mkdocs-static-i18n runs on_config again for each further language, on the config
    # this already changed: the site's own address is the one seen first.
    site_url = _first_site_url.setdefault("url", (config.site_url or "").rstrip("/") + "/")
    root = re.sub(r"^[a-z]+://[^/]+", "", site_url)  # the site's path, /steadyloop/
    config.site_url = site_url + folder(version)
    config.extra["versions"] = {
        "current": version,
        "all": [{"version": v, "path": root + folder(v)} for v in versions],
    }
    return config


# -- the command --------------------------------------------------------------------------


def tree_env(tree: Path, *, own_cache: bool) -> dict[str, str]:
    """The environment of a build of ``tree``: its own ``src/`` first on the import path.

    ``own_cache`` drops ``STEADYLOOP_NOTEBOOK_CACHE``, so a tag's executed notebooks go to
    its own tree: a shared cache keeps one copy per notebook, and a tag's would replace
    the branch's.
    """
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    env["PYTHONPATH"] = str(tree / "src")
    env.pop("STEADYLOOP_DOCS_FAST", None)
    if own_cache:
        env.pop("STEADYLOOP_NOTEBOOK_CACHE", None)
    return env


def build(
    tree: Path, out: Path, version: str, versions: list[str], *, fast: bool, own_cache: bool
) -> None:
    """Build ``tree``'s site into ``out`` as ``version``, from ``tree``'s own source."""
    env = tree_env(tree, own_cache=own_cache)
    env[_VERSION_ENV] = version
    env[_VERSIONS_ENV] = json.dumps(versions)
    if fast:
        env["STEADYLOOP_DOCS_FAST"] = "1"
    else:
        notebooks = [sys.executable, "-m", "pytest", "notebooks", "-q", "-p", "no:cacheprovider"]
        done = subprocess.run(notebooks, cwd=tree, env=env, check=False)
        if done.returncode != 0:
            raise SystemExit(f"the notebooks of {version} failed ({done.returncode})")
    cmd = [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(tree / "mkdocs.yml")]
    done = subprocess.run([*cmd, "-d", str(out)], cwd=tree, env=env, check=False)
    if done.returncode != 0:
        raise SystemExit(f"the build of {version} failed ({done.returncode})")


def build_all(repo: Path, site: Path, *, fast: bool) -> list[str]:
    """Build the branch into ``site`` and every tag into ``site/<tag>``; return the versions."""
    releases = tags(repo)
    versions = [BRANCH_VERSION, *releases]
    build(repo, site, BRANCH_VERSION, versions, fast=fast, own_cache=False)
    for tag in releases:
        with tempfile.TemporaryDirectory(prefix=f"docs-{tag}-") as tmp:
            tree = Path(tmp) / "tree"
            subprocess.run(
                ["git", "-C", str(repo), "worktree", "add", "--detach", "--quiet", str(tree), tag],
                check=True,
            )
            try:
                build(tree, site / tag, tag, versions, fast=fast, own_cache=True)
            finally:
                subprocess.run(
                    ["git", "-C", str(repo), "worktree", "remove", "--force", str(tree)],
                    check=False,
                )
    return versions


def main() -> None:
    """Build every version of the site."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("site", type=Path, help="the folder to build into")
    parser.add_argument("--fast", action="store_true", help="notebooks without outputs")
    args = parser.parse_args()
    versions = build_all(ROOT, args.site.resolve(), fast=args.fast)
    print("built:", ", ".join(versions))


if __name__ == "__main__":
    main()
