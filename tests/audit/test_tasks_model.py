"""The declarative task spec model: the same verdicts and digests as the hand-written checks, clear errors.

``EXPECTED`` was computed once by the hand-written validation this model replaced
(``src/steadyloop/audit/_tasks.py`` at commit 0cfcfd1): for each input of ``CORPUS``,
``ok <digest>`` when it was accepted (the digest stored queues compare for
idempotency, so it must never change), or ``refused <field>``.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from steadyloop.audit import GoalSpec, TaskSpec, TaskSpecError, VerifySpec
from steadyloop.records import canonical_json

V = {"command": ["true"]}
G = {"goal": "g", "verify": ["true"]}


def j(**kw: Any) -> tuple[str, dict[str, Any]]:
    return ("json", {"prompt": "p", **kw})


def goal(**kw: Any) -> tuple[str, dict[str, Any]]:
    return ("json", {"prompt": "p", "goal": {**G, **kw}})


def verify(verify: Any) -> tuple[str, dict[str, Any]]:
    return ("json", {"prompt": "p", "goal": {"goal": "g", "verify": verify}})


def venv(**kw: Any) -> tuple[str, dict[str, Any]]:
    return verify({**V, **kw})


CORPUS: dict[str, tuple[str, Any]] = {
    # whole specs
    "minimal": j(),
    "full": j(
        task_id="t-1",
        priority=-7,
        depends_on=["a", "b"],
        idempotency_key="k1",
        goal={
            "goal": "answer.txt holds 42",
            "verify": {
                "command": ["pytest", "-q"],
                "timeout": 12.5,
                "env": {"A": "1"},
                "allow_env": ["HOME"],
            },
            "round_budget": 4,
        },
        max_audit_rounds=2,
        workdir="/tmp/w",
        user_id="u",
        metadata={"k": [1, {"x": None}], "z": "ü"},
    ),
    "to_json_form": j(
        task_id=None,
        priority=0,
        depends_on=[],
        idempotency_key=None,
        goal=None,
        max_audit_rounds=3,
        workdir=None,
        user_id="audit",
        metadata={},
    ),
    "not_object": ("json", ["prompt"]),
    "string": ("json", "prompt"),
    "empty": ("json", {}),
    # prompt
    "prompt_missing": ("json", {"task_id": "x"}),
    "prompt_blank": ("json", {"prompt": " \n\t"}),
    "prompt_empty": ("json", {"prompt": ""}),
    "prompt_null": ("json", {"prompt": None}),
    "prompt_int": ("json", {"prompt": 5}),
    "prompt_list": ("json", {"prompt": ["p"]}),
    "prompt_surrogate": ("json", {"prompt": "p\ud800"}),
    "prompt_unicode": ("json", {"prompt": "Ünïcode\n\twith  spaces \x85"}),
    "prompt_nul": ("json", {"prompt": "a\0b"}),
    "prompt_large": ("json", {"prompt": "x" * 100_000}),
    # unknown fields
    "unknown_top": j(promt="typo"),
    "unknown_goal": goal(budget=2),
    "unknown_verify": venv(cmd=["x"]),
    "unknown_mixed_keys": ("json", {1: "x", "zz": "y", "prompt": "p"}),
    # task_id
    "task_id_null": j(task_id=None),
    "task_id_empty": j(task_id=""),
    "task_id_int": j(task_id=5),
    "task_id_c1": j(task_id="a\x85b"),
    "task_id_nul": j(task_id="a\0b"),
    "task_id_surrogate": j(task_id="a\udc00"),
    "task_id_200": j(task_id="x" * 200),
    "task_id_201": j(task_id="x" * 201),
    "task_id_wide_200": j(task_id="é" * 100),
    "task_id_wide_201": j(task_id="é" * 100 + "x"),
    "task_id_spaces": j(task_id=" a "),
    "task_id_quote": j(task_id='a"],["b'),
    # priority
    "priority_max": j(priority=2**63 - 1),
    "priority_min": j(priority=-(2**63)),
    "priority_over": j(priority=2**63),
    "priority_under": j(priority=-(2**63) - 1),
    "priority_bool": j(priority=True),
    "priority_float": j(priority=1.0),
    "priority_str": j(priority="3"),
    "priority_null": j(priority=None),
    # depends_on
    "deps_null": j(depends_on=None),
    "deps_int": j(depends_on=5),
    "deps_str": j(depends_on="a"),
    "deps_int_item": j(depends_on=[5]),
    "deps_empty_item": j(depends_on=[""]),
    "deps_nul_item": j(depends_on=["a\0"]),
    "deps_twice": j(depends_on=["a", "a"]),
    "deps_self": j(task_id="a", depends_on=["a"]),
    "deps_self_later": j(task_id="a", depends_on=["b", "a"]),
    "deps_long_item": j(depends_on=["x" * 201]),
    "deps_object": j(depends_on={"a": 1}),
    "deps_second_bad": j(depends_on=["a", 2]),
    # idempotency_key
    "key_ok": j(idempotency_key="k"),
    "key_empty": j(idempotency_key=""),
    "key_int": j(idempotency_key=7),
    "key_long": j(idempotency_key="k" * 201),
    "key_nul": j(idempotency_key="k\0"),
    # max_audit_rounds
    "cap_zero": j(max_audit_rounds=0),
    "cap_negative": j(max_audit_rounds=-2),
    "cap_bool": j(max_audit_rounds=True),
    "cap_float": j(max_audit_rounds=2.0),
    "cap_str": j(max_audit_rounds="2"),
    "cap_null": j(max_audit_rounds=None),
    "cap_big": j(max_audit_rounds=10**6),
    # workdir
    "workdir_empty": j(workdir=""),
    "workdir_nul": j(workdir="w\0"),
    "workdir_int": j(workdir=5),
    "workdir_surrogate": j(workdir="w\ud800"),
    "workdir_relative": j(workdir="sub/dir"),
    # user_id
    "user_empty": j(user_id=""),
    "user_null": j(user_id=None),
    "user_int": j(user_id=1),
    "user_surrogate": j(user_id="u\ud800"),
    "user_nul": j(user_id="u\0"),
    "user_long": j(user_id="u" * 300),
    # metadata
    "meta_null": j(metadata=None),
    "meta_list": j(metadata=[1, 2]),
    "meta_str": j(metadata="x"),
    "meta_nan": j(metadata={"x": math.nan}),
    "meta_int_key": j(metadata={1: "x"}),
    "meta_surrogate": j(metadata={"x": "\ud800"}),
    "meta_nested": j(metadata={"a": {"b": [1, 2.5, True, None, "s"]}}),
    "meta_tuple": j(metadata={"a": (1, 2)}),
    "meta_object": j(metadata={"a": object()}),
    # goal
    "goal_null": j(goal=None),
    "goal_int": j(goal=5),
    "goal_list": j(goal=["g"]),
    "goal_missing_goal": ("json", {"prompt": "p", "goal": {"verify": ["true"]}}),
    "goal_blank": goal(goal="  "),
    "goal_int_goal": goal(goal=3),
    "goal_surrogate": goal(goal="g\ud800"),
    "goal_missing_verify": ("json", {"prompt": "p", "goal": {"goal": "g"}}),
    "goal_verify_null": goal(verify=None),
    "budget_one": goal(round_budget=1),
    "budget_zero": goal(round_budget=0),
    "budget_negative": goal(round_budget=-1),
    "budget_bool": goal(round_budget=True),
    "budget_float": goal(round_budget=1.5),
    "budget_str": goal(round_budget="3"),
    "budget_null": goal(round_budget=None),
    # verify
    "verify_str": verify("python -m pytest -q"),
    "verify_list": verify(["python", "-m", "pytest"]),
    "verify_empty_str": verify(""),
    "verify_empty_list": verify([]),
    "verify_int": verify(5),
    "verify_no_command": verify({"timeout": 3}),
    "verify_unbalanced": verify("echo 'oops"),
    "verify_blank_program": verify(["  ", "x"]),
    "verify_int_arg": verify(["true", 1]),
    "verify_nul_arg": verify(["tr\0ue"]),
    "verify_surrogate_arg": verify(["tr\ud800ue"]),
    "verify_command_str": venv(command="make test"),
    "verify_command_int": venv(command=5),
    "verify_command_null": venv(command=None),
    "verify_command_object": venv(command={"a": 1}),
    "timeout_int": venv(timeout=5),
    "timeout_small": venv(timeout=0.001),
    "timeout_zero": venv(timeout=0),
    "timeout_negative": venv(timeout=-1.0),
    "timeout_inf": venv(timeout=math.inf),
    "timeout_nan": venv(timeout=math.nan),
    "timeout_bool": venv(timeout=True),
    "timeout_str": venv(timeout="5"),
    "timeout_null": venv(timeout=None),
    "env_null": venv(env=None),
    "env_list": venv(env=[1]),
    "env_int_value": venv(env={"A": 1}),
    "env_int_name": venv(env={1: "x"}),
    "env_equals": venv(env={"A=B": "x"}),
    "env_empty_name": venv(env={"": "x"}),
    "env_nul_name": venv(env={"A\0": "x"}),
    "env_nul_value": venv(env={"A": "x\0y"}),
    "env_surrogate": venv(env={"A": "\udc00"}),
    "env_empty_value": venv(env={"A": ""}),
    "allow_null": venv(allow_env=None),
    "allow_int": venv(allow_env=5),
    "allow_str": venv(allow_env="HOME"),
    "allow_int_item": venv(allow_env=[1]),
    "allow_empty_item": venv(allow_env=[""]),
    "allow_object": venv(allow_env={"HOME": 1}),
    "allow_two": venv(allow_env=["HOME", "LANG"]),
    # constructors
    "ctor_minimal": ("task", {"prompt": "p"}),
    "ctor_tuple_deps": ("task", {"prompt": "p", "task_id": "x", "depends_on": ("a", "b")}),
    "ctor_list_deps": ("task", {"prompt": "p", "depends_on": ["a"]}),
    "ctor_str_deps": ("task", {"prompt": "p", "depends_on": "a"}),
    "ctor_prompt_none": ("task", {"prompt": None}),
    "ctor_goal_not_goalspec": ("task", {"prompt": "p", "goal": "g"}),
    "ctor_metadata_list": ("task", {"prompt": "p", "metadata": [1]}),
    "ctor_priority_bool": ("task", {"prompt": "p", "priority": False}),
    "ctor_goal": ("goal", {"goal": "g", "verify": {"command": ("true",)}, "round_budget": 2}),
    "ctor_goal_blank": ("goal", {"goal": "", "verify": {"command": ("true",)}}),
    "ctor_goal_verify_not_spec": ("goal", {"goal": "g", "verify": "true"}),
    "ctor_goal_budget_zero": (
        "goal",
        {"goal": "g", "verify": {"command": ("t",)}, "round_budget": 0},
    ),
    "ctor_verify_str": ("verify", {"command": "a 'b c'"}),
    "ctor_verify_tuple": ("verify", {"command": ("a", "b"), "timeout": 1}),
    "ctor_verify_empty": ("verify", {"command": ()}),
    "ctor_verify_env_tuple_allow": ("verify", {"command": ("a",), "allow_env": ("X",)}),
    "ctor_verify_allow_str": ("verify", {"command": ("a",), "allow_env": "X"}),
    "ctor_verify_env_list": ("verify", {"command": ("a",), "env": [("A", "b")]}),
}


EXPECTED: dict[str, str] = {
    "minimal": "ok eb3b904c2683c1618410af1737c1aa3cad9f999689f1c1eb80975f7dda4f1099",
    "full": "ok a50ab7978cd1fa413ff1d40775ebdd11cb36078afc215814a865780c7234d2de",
    "to_json_form": "ok eb3b904c2683c1618410af1737c1aa3cad9f999689f1c1eb80975f7dda4f1099",
    "not_object": "refused ",
    "string": "refused ",
    "empty": "refused prompt",
    "prompt_missing": "refused prompt",
    "prompt_blank": "refused prompt",
    "prompt_empty": "refused prompt",
    "prompt_null": "refused prompt",
    "prompt_int": "refused prompt",
    "prompt_list": "refused prompt",
    "prompt_surrogate": "refused prompt",
    "prompt_unicode": "ok 7a856ff3a9d0d7953df3c1f3032dd45d2203fca10111fad8d3477b24d470157b",
    "prompt_nul": "ok 12ee09e6a20fb9f22683d45b8233b38e99f48aedef518195ef0cf62d9db0b4d2",
    "prompt_large": "ok bc5c98ea7788f4f306420b0f209c13c7cf411c242c7b0e6f53caf1ef10d47489",
    "unknown_top": "refused promt",
    "unknown_goal": "refused goal.budget",
    "unknown_verify": "refused goal.verify.cmd",
    "unknown_mixed_keys": "refused 1",
    "task_id_null": "ok eb3b904c2683c1618410af1737c1aa3cad9f999689f1c1eb80975f7dda4f1099",
    "task_id_empty": "refused task_id",
    "task_id_int": "refused task_id",
    "task_id_c1": "ok 077d7aa144c2b709fa6a8fbb2acba312b329a0c9ab47bb98fed6553c417b09da",
    "task_id_nul": "refused task_id",
    "task_id_surrogate": "refused task_id",
    "task_id_200": "ok 9b17d6676ecf183d0b5f6ad3929b78a44032b2de71d6a799079168b8e6bdd5de",
    "task_id_201": "refused task_id",
    "task_id_wide_200": "ok 4bcbe26e046b9d379a4987c21101550c8ba6932a8dc98a74b389fa55409f9598",
    "task_id_wide_201": "refused task_id",
    "task_id_spaces": "ok a5854885d3103eb8790374ca400a31e265d2e899f4f5051154b35d94874631ca",
    "task_id_quote": "ok 805e2971f93c2c5932853d49c996d19c3b0748d4aec485e53c23bfeb77cc421d",
    "priority_max": "ok 2512b13f2e2a8550fab227549c78b06d94eb651661fb24a4739b3e409099694f",
    "priority_min": "ok e0a2a644e670c983443cad412131f3f1f7a49db077ee0a02652b9044c39be177",
    "priority_over": "refused priority",
    "priority_under": "refused priority",
    "priority_bool": "refused priority",
    "priority_float": "refused priority",
    "priority_str": "refused priority",
    "priority_null": "refused priority",
    "deps_null": "ok eb3b904c2683c1618410af1737c1aa3cad9f999689f1c1eb80975f7dda4f1099",
    "deps_int": "refused depends_on",
    "deps_str": "refused depends_on",
    "deps_int_item": "refused depends_on",
    "deps_empty_item": "refused depends_on",
    "deps_nul_item": "refused depends_on",
    "deps_twice": "refused depends_on",
    "deps_self": "refused depends_on",
    "deps_self_later": "refused depends_on",
    "deps_long_item": "refused depends_on",
    "deps_object": "refused depends_on",
    "deps_second_bad": "refused depends_on",
    "key_ok": "ok b2c7de5e82b4f7d293651b829a552a220bb915946e179989dae9a5a58cc35fa5",
    "key_empty": "refused idempotency_key",
    "key_int": "refused idempotency_key",
    "key_long": "refused idempotency_key",
    "key_nul": "refused idempotency_key",
    "cap_zero": "refused max_audit_rounds",
    "cap_negative": "refused max_audit_rounds",
    "cap_bool": "refused max_audit_rounds",
    "cap_float": "refused max_audit_rounds",
    "cap_str": "refused max_audit_rounds",
    "cap_null": "refused max_audit_rounds",
    "cap_big": "ok 492a613005931e577853e658ce601cabe6029c269dfad4e9d3bda88e1819fabb",
    "workdir_empty": "refused workdir",
    "workdir_nul": "refused workdir",
    "workdir_int": "refused workdir",
    "workdir_surrogate": "refused workdir",
    "workdir_relative": "ok b355f581ebc640b5455ae9d2dbf7c6ab31099176e802fe54b5350591803a5dec",
    "user_empty": "refused user_id",
    "user_null": "refused user_id",
    "user_int": "refused user_id",
    "user_surrogate": "refused user_id",
    "user_nul": "ok 835e989c1780569224fba9f77604858b5486eb156b5eddc4f43974b72b4f06ae",
    "user_long": "ok a2e1ff343d97ed3f828c49282e0b28358f66bfab1a56a6b3a00bc6f0fb867474",
    "meta_null": "ok eb3b904c2683c1618410af1737c1aa3cad9f999689f1c1eb80975f7dda4f1099",
    "meta_list": "refused metadata",
    "meta_str": "refused metadata",
    "meta_nan": "refused metadata",
    "meta_int_key": "refused metadata",
    "meta_surrogate": "refused metadata",
    "meta_nested": "ok 665ea3c19324f3ac4d0b6db8a0830abf1ed0fe5088725aae77d80d77e9661f5c",
    "meta_tuple": "ok ca2182c53c135e3fd168cc654388c9ab732302dce01540be6a377d991d70d072",
    "meta_object": "refused metadata",
    "goal_null": "ok eb3b904c2683c1618410af1737c1aa3cad9f999689f1c1eb80975f7dda4f1099",
    "goal_int": "refused goal",
    "goal_list": "refused goal",
    "goal_missing_goal": "refused goal.goal",
    "goal_blank": "refused goal.goal",
    "goal_int_goal": "refused goal.goal",
    "goal_surrogate": "refused goal.goal",
    "goal_missing_verify": "refused goal.verify",
    "goal_verify_null": "refused goal.verify.command",
    "budget_one": "ok fd4a7f1b59899cbd616a8d1425aa5db0ab7d892fa834e8e39aee258115a2c7ff",
    "budget_zero": "refused goal.round_budget",
    "budget_negative": "refused goal.round_budget",
    "budget_bool": "refused goal.round_budget",
    "budget_float": "refused goal.round_budget",
    "budget_str": "refused goal.round_budget",
    "budget_null": "refused goal.round_budget",
    "verify_str": "ok b479db2cbd523a87a1fb44f951cfc8968db0cb083a38f56348821daaeb057cd3",
    "verify_list": "ok 55f95af8d0c25cedd32338de0a5d0e6590ce4ebad5749a2cf050a1cdc1b8bda3",
    "verify_empty_str": "refused goal.verify.command",
    "verify_empty_list": "refused goal.verify.command",
    "verify_int": "refused goal.verify.command",
    "verify_no_command": "refused goal.verify.command",
    "verify_unbalanced": "refused goal.verify.command",
    "verify_blank_program": "refused goal.verify.command",
    "verify_int_arg": "refused goal.verify.command",
    "verify_nul_arg": "refused goal.verify.command",
    "verify_surrogate_arg": "refused goal.verify.command",
    "verify_command_str": "ok 74116b7a6ad7c41cf54de11b65bfb75971794b5071c762ff8d479b731b655971",
    "verify_command_int": "refused goal.verify.command",
    "verify_command_null": "refused goal.verify.command",
    "verify_command_object": "refused goal.verify.command",
    "timeout_int": "ok 3b5001875a4d023d8e97b1dbfa0592df00a0ad00c6d4fb6edf76b09fabb55186",
    "timeout_small": "ok 1410e80a2139a3109d8c6c404ff8e770b75f8ed86e735362e4039702c662b39f",
    "timeout_zero": "refused goal.verify.timeout",
    "timeout_negative": "refused goal.verify.timeout",
    "timeout_inf": "refused goal.verify.timeout",
    "timeout_nan": "refused goal.verify.timeout",
    "timeout_bool": "refused goal.verify.timeout",
    "timeout_str": "refused goal.verify.timeout",
    "timeout_null": "refused goal.verify.timeout",
    "env_null": "ok 701b805bc940d0d06886bbb16d715305d02173996b62d95f6783b2babb8f6028",
    "env_list": "refused goal.verify.env",
    "env_int_value": "refused goal.verify.env",
    "env_int_name": "refused goal.verify.env",
    "env_equals": "refused goal.verify.env",
    "env_empty_name": "refused goal.verify.env",
    "env_nul_name": "refused goal.verify.env",
    "env_nul_value": "refused goal.verify.env",
    "env_surrogate": "refused goal.verify.env",
    "env_empty_value": "ok 03eb80285699e9d2f27a93fad48eab34f1cc5e75f11b489de5b1002202a06839",
    "allow_null": "ok 701b805bc940d0d06886bbb16d715305d02173996b62d95f6783b2babb8f6028",
    "allow_int": "refused goal.verify.allow_env",
    "allow_str": "refused goal.verify.allow_env",
    "allow_int_item": "refused goal.verify.allow_env",
    "allow_empty_item": "refused goal.verify.allow_env",
    "allow_object": "refused goal.verify.allow_env",
    "allow_two": "ok c2bd19f295d0364b88f49d2670efdc9782a063a676102c216d0629e786f780cd",
    "ctor_minimal": "ok eb3b904c2683c1618410af1737c1aa3cad9f999689f1c1eb80975f7dda4f1099",
    "ctor_tuple_deps": "ok 99e0f5e288e8f561ddd2df5ed6dda4f1a5a6184c947ebe508e9eb53484ab7992",
    "ctor_list_deps": "ok a80e6c61e2d23465f1b8aa764409f39dee339e79e82303e658b7733919a56f8f",
    "ctor_str_deps": "refused depends_on",
    "ctor_prompt_none": "refused prompt",
    "ctor_goal_not_goalspec": "refused goal",
    "ctor_metadata_list": "refused metadata",
    "ctor_priority_bool": "refused priority",
    "ctor_goal": "ok f9d58de5be120774df87b374df8c73de4d030a59aca79a13934dc114832e149e",
    "ctor_goal_blank": "refused goal.goal",
    "ctor_goal_verify_not_spec": "refused goal.verify",
    "ctor_goal_budget_zero": "refused goal.round_budget",
    "ctor_verify_str": "ok 73f7b47467d996aab3c0277a7e02b28a5f96afd9d5e01f3ca69ca9a62f379ed1",
    "ctor_verify_tuple": "ok 022a1110cf87a47fdfa2b5b9f382daa7d50d80041e322bdb54130e776cd7f208",
    "ctor_verify_empty": "refused goal.verify.command",
    "ctor_verify_env_tuple_allow": "ok d0c2cf1554495c89f50dd3bd498f399a6920352eb2a6c90cb3f41b3d457c57c3",
    "ctor_verify_allow_str": "refused goal.verify.allow_env",
    "ctor_verify_env_list": "refused goal.verify.env",
}

# Where the model decides differently from the hand-written checks, on purpose.
CHANGED: dict[str, str] = {
    # was 'refused goal.verify.command': a null verify is a missing verify command
    "goal_verify_null": "refused goal.verify",
    # was 'refused goal.verify': GoalSpec takes the command alone, as its JSON form always did
    "ctor_goal_verify_not_spec": (
        "ok 701b805bc940d0d06886bbb16d715305d02173996b62d95f6783b2babb8f6028"
    ),
}


def _make(case: tuple[str, Any]) -> TaskSpec:
    kind, data = case
    if kind == "json":
        return TaskSpec.from_json(data)
    if kind == "task":
        return TaskSpec(**data)
    if kind == "goal":
        verify = data["verify"]
        verify = VerifySpec(**verify) if isinstance(verify, dict) else verify
        return TaskSpec(prompt="p", goal=GoalSpec(**{**data, "verify": verify}))
    return TaskSpec(prompt="p", goal=GoalSpec("g", VerifySpec(**data)))


def _verdict(case: tuple[str, Any]) -> str:
    try:
        spec = _make(case)
    except TaskSpecError as exc:
        return f"refused {exc.field}"
    return f"ok {spec.digest()}"


def test_the_tables_cover_the_same_inputs() -> None:
    """Every corpus input has an expected verdict, and every changed verdict is a corpus input."""
    assert set(CORPUS) == set(EXPECTED)
    assert set(CHANGED) <= set(CORPUS)


@pytest.mark.parametrize("name", list(CORPUS))
def test_the_model_accepts_and_refuses_as_the_hand_written_checks_did(name: str) -> None:
    """Each input is accepted with the same digest, or refused naming the same field, as before."""
    assert _verdict(CORPUS[name]) == CHANGED.get(name, EXPECTED[name])


REFUSED = [n for n in CORPUS if CHANGED.get(n, EXPECTED[n]).startswith("refused")]


@pytest.mark.parametrize("name", REFUSED)
def test_every_refusal_names_its_place_in_plain_words(name: str) -> None:
    """A refusal's message names the field it is about and carries no pydantic wording."""
    with pytest.raises(TaskSpecError) as info:
        _make(CORPUS[name])
    message, field = str(info.value), info.value.field
    for leak in ("pydantic", "Input should", "validation error", "Value error", "{where}", "\n"):
        assert leak not in message
    if field:
        # The dotted field, or its last part quoted (an unknown field).
        assert field in message or repr(field.rsplit(".", 1)[-1]) in message, message
    else:
        assert message.startswith("a task spec must be a JSON object")


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        ({"depends_on": ["a", 2]}, "depends_on", "depends_on[1] must be a non-empty string, got 2"),
        (
            {"depends_on": ["a", "x" * 201]},
            "depends_on",
            "depends_on[1] is 201 UTF-8 bytes long; the limit is 200",
        ),
        (
            {"goal": {"goal": "g", "verify": ["true", 1]}},
            "goal.verify.command",
            "goal.verify.command[1] must be a string without NUL, got 1",
        ),
        (
            {"goal": {"goal": "g", "verify": {"command": "t", "env": {"A": "1", "B": 2}}}},
            "goal.verify.env",
            "goal.verify.env['B'] must be a string without NUL, got 2",
        ),
        (
            {"goal": {"goal": "g", "verify": {"command": "t", "env": {"A=B": "x"}}}},
            "goal.verify.env",
            "the key 'A=B' of goal.verify.env must be a name without '=' or NUL, got 'A=B'",
        ),
        (
            {"goal": {"goal": "g", "verify": {"command": "t", "allow_env": ["HOME", ""]}}},
            "goal.verify.allow_env",
            "goal.verify.allow_env[1] must be a non-empty name, got ''",
        ),
        (
            {"goal": {"goal": "g", "verify": {"command": "t", "timeout": 0}}},
            "goal.verify.timeout",
            "goal.verify.timeout must be a positive, finite number of seconds, got 0",
        ),
        (
            {"goal": {"goal": "g", "verify": {"cmd": "t"}}},
            "goal.verify.cmd",
            "unknown field 'cmd' in goal.verify; known fields: allow_env, command, env, timeout",
        ),
        (
            {"goal": {"goal": "g", "verify": "t", "round_budget": 0}},
            "goal.round_budget",
            "goal.round_budget: the round budget must be a positive integer (at least 1), got 0",
        ),
        ({"goal": {"verify": "t"}}, "goal.goal", "goal.goal: a goal-mode task needs a non-blank"),
        ({"goal": {"goal": "g"}}, "goal.verify", "goal.verify: a goal-mode task needs a verify"),
        ({"goal": [1]}, "goal", "goal must be an object, got [1]"),
        (
            {"metadata": {"a": [1, math.nan]}},
            "metadata",
            "metadata has no JSON form: nan is not a finite number (at /a/1)",
        ),
        (
            {"priority": 2**63},
            "priority",
            "priority must be an integer from -2**63 to 2**63 - 1, got 9223372036854775808",
        ),
        (
            {"priority": "1"},
            "priority",
            "priority must be an integer from -2**63 to 2**63 - 1, got '1'",
        ),
        (
            {"workdir": "w\0"},
            "workdir",
            "workdir must be a non-empty path without NUL, got 'w\\x00'",
        ),
        (
            {"prompt": "a\ud800"},
            "prompt",
            "prompt is not valid Unicode: a lone surrogate at index 1",
        ),
        ({"prompt": " "}, "prompt", "prompt: a task needs a prompt (missing or blank), got ' '"),
    ],
)
def test_errors_name_the_field_and_the_exact_place(
    data: dict[str, Any], field: str, message: str
) -> None:
    """The error's field is the dotted spec field; its message names the place, index or key included."""
    with pytest.raises(TaskSpecError) as info:
        TaskSpec.from_json({"prompt": "p", **data})
    assert info.value.field == field
    assert message in str(info.value)


def test_every_problem_is_listed_and_the_first_names_the_field() -> None:
    """A spec with several problems gets one error listing each; its field is the first one's."""
    with pytest.raises(TaskSpecError) as info:
        TaskSpec.from_json(
            {"prompt": "", "priority": "x", "goal": {"goal": "g", "verify": {"command": []}}}
        )
    assert info.value.field == "prompt"
    parts = str(info.value).split("; ")
    assert [p.split()[0].rstrip(":") for p in parts] == [
        "prompt",
        "priority",
        "goal.verify.command",
    ]


def test_parts_built_alone_name_their_place_in_a_task_spec() -> None:
    """A GoalSpec or VerifySpec refused on its own names the field as a task spec's JSON form does."""
    with pytest.raises(TaskSpecError) as info:
        VerifySpec(("true",), env={"A": "x\0"})
    assert info.value.field == "goal.verify.env"
    assert "goal.verify.env['A'] must be a string without NUL" in str(info.value)
    with pytest.raises(TaskSpecError) as info:
        GoalSpec.from_json({"goal": "g", "verify": "t", "rounds": 2})
    assert info.value.field == "goal.rounds"


def test_python_and_json_give_equal_specs_and_the_same_defaults() -> None:
    """A spec built in Python equals the one read from its JSON form, defaults included."""
    assert TaskSpec(prompt="p") == TaskSpec.from_json({"prompt": "p"})
    assert GoalSpec("g", VerifySpec(("t",))) == GoalSpec.from_json({"goal": "g", "verify": ["t"]})
    assert VerifySpec(("t",)) == VerifySpec.from_json("t") == VerifySpec.from_json({"command": "t"})


def test_fields_get_their_normal_form() -> None:
    """Lists become tuples, mappings become dicts, a command line is split, and ints stay ints."""
    spec = TaskSpec(
        prompt="p",
        depends_on=["a"],  # type: ignore[arg-type]
        metadata={"k": (1, 2)},
        goal=GoalSpec("g", VerifySpec("a 'b c'", timeout=5, allow_env=["X"])),  # type: ignore[arg-type]
    )
    assert spec.depends_on == ("a",) and type(spec.metadata) is dict
    assert spec.goal is not None and spec.goal.verify.command == ("a", "b c")
    assert spec.goal.verify.allow_env == ("X",)
    # 5, not 5.0: the stored form, and so the digest, keeps what was given.
    assert '"timeout":5}' in canonical_json(spec.to_json())


def test_importing_the_audit_package_does_not_import_pydantic() -> None:
    """steadyloop.audit loads pydantic only when the first spec is validated, not at import."""
    code = (
        "import sys, steadyloop.audit as a; before = 'pydantic' in sys.modules; "
        "a.TaskSpec(prompt='p'); print(before, 'pydantic' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True"]


_ids = st.text(min_size=0, max_size=4) | st.integers(-2, 2) | st.none()
_values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.floats() | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=6,
)
_verify_json = _values | st.fixed_dictionaries(
    {},
    optional={
        "command": st.lists(st.text(max_size=3), max_size=3) | st.text(max_size=6) | _values,
        "timeout": st.floats() | st.integers(-1, 3) | _values,
        "env": st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=2) | _values,
        "allow_env": st.lists(st.text(max_size=3), max_size=2) | _values,
    },
)
_goal_json = _values | st.fixed_dictionaries(
    {},
    optional={
        "goal": st.text(max_size=3) | _values,
        "verify": _verify_json,
        "round_budget": st.integers(-1, 3) | _values,
    },
)
_spec_json = st.fixed_dictionaries(
    {},
    optional={
        "prompt": st.text(max_size=4) | _values,
        "task_id": _ids,
        "priority": st.integers() | _values,
        "depends_on": st.lists(_ids, max_size=3) | _values,
        "idempotency_key": _ids,
        "goal": st.none() | _goal_json,
        "max_audit_rounds": st.integers(-1, 3) | _values,
        "workdir": st.text(max_size=3) | _values,
        "user_id": st.text(max_size=3) | _values,
        "metadata": _values,
        "extra": _values,
    },
)


@given(_spec_json)
def test_any_json_is_a_spec_that_round_trips_or_a_task_spec_error(data: dict[str, Any]) -> None:
    """Any JSON input reads as a spec that keeps its stored form, or is a TaskSpecError naming a field."""
    refused: TaskSpecError | None = None
    try:
        spec = TaskSpec.from_json(data)
    except TaskSpecError as exc:
        refused = exc
    if refused is not None:
        assert refused.field.split(".")[0] in {*data, "prompt", ""}
        return
    stored = canonical_json(spec.to_json())
    again = TaskSpec.from_json(json.loads(stored))
    assert again == spec and canonical_json(again.to_json()) == stored
    assert again.digest() == spec.digest()
    fields = {name: getattr(spec, name) for name in spec.to_json()}
    assert TaskSpec(**fields) == spec


def test_opening_a_queue_loads_the_spec_model_before_any_claim(tmp_path: Any) -> None:
    """open_queue imports the spec model up front, so a claim never spends that moment under a lease."""
    code = (
        "import asyncio, sys\n"
        "from steadyloop.audit import open_queue\n"
        "async def main():\n"
        "    before = 'steadyloop.audit._spec_model' in sys.modules\n"
        f"    queue = await open_queue('sqlite:///{tmp_path}/q.db')\n"
        "    await queue.close()\n"
        "    print(before, 'steadyloop.audit._spec_model' in sys.modules)\n"
        "asyncio.run(main())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True"]
