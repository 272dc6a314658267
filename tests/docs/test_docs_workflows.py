"""The GitHub workflow files, validated offline."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from typing import Any

import pytest
import yaml
from docs_support import ROOT

WORKFLOWS = ROOT / ".github" / "workflows"
IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def load(name: str) -> dict[Any, Any]:
    data = yaml.safe_load((WORKFLOWS / name).read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    # YAML 1.1 reads the key "on" as True.
    if True in data:
        data["on"] = data.pop(True)
    return data


def steps(job: dict[str, Any]) -> list[dict[str, Any]]:
    found = job.get("steps", [])
    assert isinstance(found, list)
    return found


def uses(workflow: dict[str, Any]) -> list[str]:
    return [s["uses"] for job in workflow["jobs"].values() for s in steps(job) if "uses" in s]


@pytest.mark.parametrize("name", ["ci.yml", "docs.yml"])
def test_workflow_shape(name: str) -> None:
    """Each workflow has triggers, read-only default permissions and bounded jobs."""
    wf = load(name)
    assert {"name", "on", "jobs", "permissions"} <= set(wf)
    assert wf["permissions"] == {"contents": "read"}
    for job_name, job in wf["jobs"].items():
        assert "runs-on" in job, job_name
        assert isinstance(job.get("timeout-minutes"), int), f"{job_name} has no timeout"
        assert steps(job), f"{job_name} has no steps"
        for step in steps(job):
            assert ("uses" in step) != ("run" in step), f"{job_name}: a step needs uses or run"


@pytest.mark.parametrize("name", ["ci.yml", "docs.yml"])
def test_actions_are_pinned(name: str) -> None:
    """Every action names a version (a release tag or a commit), never a branch."""
    for action in uses(load(name)):
        ref = action.partition("@")[2]
        assert re.fullmatch(r"v\d+(\.\d+){0,2}|[0-9a-f]{40}", ref), action


def test_checkout_keeps_no_credentials() -> None:
    """No job leaves the token in the checked-out repository."""
    for name in ("ci.yml", "docs.yml"):
        for job in load(name)["jobs"].values():
            for step in steps(job):
                if step.get("uses", "").startswith("actions/checkout@"):
                    assert step.get("with", {}).get("persist-credentials") is False


def test_ci_runs_lint_types_tests_and_notebooks() -> None:
    """CI lints, type-checks, and runs the README's pytest (notebooks included, once) against the three servers."""
    jobs = load("ci.yml")["jobs"]
    assert {"lint", "types", "test"} <= set(jobs)
    runs = {name: " ".join(s.get("run", "") for s in steps(job)) for name, job in jobs.items()}
    assert "ruff check" in runs["lint"] and "ruff format --check" in runs["lint"]
    assert "mypy" in runs["types"]
    services = jobs["test"]["services"]
    assert {"postgres", "redis", "mariadb"} <= set(services)
    images = {name: svc["image"].split(":")[0] for name, svc in services.items()}
    assert images == {"postgres": "postgres", "redis": "redis", "mariadb": "mariadb"}
    env = jobs["test"]["env"]
    for var in ("STEADYLOOP_POSTGRES_URL", "STEADYLOOP_REDIS_URL", "STEADYLOOP_MYSQL_URL"):
        assert var in env
    pytest_runs = [
        s["run"] for job in jobs.values() for s in steps(job) if "pytest" in s.get("run", "")
    ]
    assert pytest_runs == ["uv run pytest"], (
        "one run of every test and notebook, as the README says"
    )


def test_docs_builds_strictly_and_deploys_to_pages() -> None:
    """Docs: every version built strictly, the Pages artifact, a deploy job with minimal rights."""
    wf = load("docs.yml")
    build, deploy = wf["jobs"]["build"], wf["jobs"]["deploy"]
    build_runs = [s.get("run", "") for s in steps(build)]
    assert "uv run pytest notebooks" in build_runs, (
        "nbmake executes the notebooks the build renders"
    )
    versioned = "uv run python hooks/versions.py site"
    assert versioned in build_runs, "the versioned build: the branch and every tag"
    assert build_runs.index("uv run pytest notebooks") < build_runs.index(versioned)
    assert not any("--fast" in run or "mkdocs build" in run for run in build_runs)
    checkout = next(s for s in steps(build) if s.get("uses", "").startswith("actions/checkout@"))
    assert checkout["with"].get("fetch-depth") == 0, "the tags the versioned build reads"
    build_uses = [s["uses"].split("@")[0] for s in steps(build) if "uses" in s]
    assert "actions/configure-pages" in build_uses
    assert "actions/upload-pages-artifact" in build_uses
    artifact = next(
        s for s in steps(build) if s.get("uses", "").startswith("actions/upload-pages-artifact@")
    )
    assert artifact["uses"].endswith("@v3"), "v4 and later drop dotfiles (DOCS-NOTES trap 11)"
    assert deploy["needs"] == "build"
    assert deploy["permissions"] == {"pages": "write", "id-token": "write"}
    assert deploy["environment"]["name"] == "github-pages"
    assert "refs/heads/main" in deploy["if"]
    assert [s["uses"].split("@")[0] for s in steps(deploy)] == ["actions/deploy-pages"]
    assert "NO_MKDOCS_2_WARNING" in wf["env"]


def test_workflows_match_the_published_schema() -> None:
    """check-jsonschema validates both files against its bundled GitHub workflow schema."""
    if importlib.util.find_spec("check_jsonschema") is None:
        if IN_CI:
            pytest.fail("check-jsonschema is not installed; CI must validate the workflows")
        pytest.skip("check-jsonschema is not installed")
    files = [str(WORKFLOWS / "ci.yml"), str(WORKFLOWS / "docs.yml")]
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "check_jsonschema",
            "--builtin-schema",
            "vendor.github-workflows",
            *files,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
