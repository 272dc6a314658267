import json
from pathlib import Path
D = Path("src/steadyloop/replay/packs/checkpointer")
def w(name, header, ops):
    lines = [json.dumps({"op": "case", "case_id": name, **header}, ensure_ascii=False)]
    lines += [json.dumps(o, ensure_ascii=False) for o in ops]
    (D / f"{name}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
R = {"reference_only": True}
def put(t, c, values=None, **kw): return {"op": "saver_put", "thread": t, "checkpoint": c, "values": values or {}, **kw}
def writes(c, task, ws, **kw): return {"op": "saver_put_writes", "checkpoint": c, "task_id": task, "writes": [{"channel": ch, "value": v} for ch, v in ws], **kw}
def get(r, t, **kw): return {"op": "saver_get", "read": r, "thread": t, **kw}
def lst(r, t, **kw): return {"op": "saver_list", "read": r, "thread": t, **kw}

w("saver_special_writes", {"description": "Pending writes as a graph leaves them: a task's ERROR write, an INTERRUPT, a resume and a scheduled write; a task that writes again keeps its first ordinary writes and its last special ones; the writes read back after a restart, by id and as the latest.", **R}, [
    put("t1", "c0", {"messages": ["hi"]}, metadata={"source": "input", "step": -1}),
    writes("c0", "task-a", [("messages", "from a"), ("count", 1)]),
    writes("c0", "task-b", [("__error__", "ValueError: tool exploded")]),
    writes("c0", "task-c", [("__interrupt__", [{"value": "approve?", "id": "int-1"}])]),
    writes("c0", "task-a", [("messages", "from a, again"), ("count", 2)], note="an ordinary write already saved for this task and index is kept"),
    writes("c0", "task-b", [("__error__", "ValueError: second failure")], note="a special write replaces the one saved before"),
    writes("c0", "task-c", [("__interrupt__", [{"value": "approve again?", "id": "int-2"}])]),
    writes("c0", "task-d", [("__resume__", "yes"), ("__scheduled__", None)]),
    writes("c0", "task-e", [("answer", "x"), ("__error__", "KeyError: 'k'")], note="an ordinary and a special write in one call"),
    get("after_writes", "t1", checkpoint="c0"),
    put("t1", "c1", {"messages": ["hi", "from a"], "count": 1}),
    writes("c1", "task-f", [("__interrupt__", [])]),
    get("latest", "t1"),
])

w("saver_nested_namespaces", {"description": "A graph with a subgraph and a nested subgraph: checkpoints in the root namespace, in 'parent:<task>' and in 'parent:<task>|child:<task>', each read back in its own namespace; listing every namespace at once, a namespace that differs only by case, and delete_thread removing all of them.", **R}, [
    put("t1", "root0", {"x": 1}, metadata={"source": "input", "step": -1}),
    put("t1", "sub0", {"y": "a"}, ns="parent:3f2a", parent=None, metadata={"source": "input", "step": -1}),
    put("t1", "deep0", {"z": [1]}, ns="parent:3f2a|child:9b1c", parent=None),
    put("t1", "root1", {"x": 2}),
    put("t1", "sub1", {"y": "b"}, ns="parent:3f2a"),
    put("t1", "deep1", {"z": [1, 2]}, ns="parent:3f2a|child:9b1c"),
    put("t1", "case0", {"w": "upper"}, ns="Parent:3f2a", parent=None),
    writes("sub1", "sub-task", [("y", "c"), ("__interrupt__", [{"value": "in subgraph", "id": "i"}])]),
    writes("deep1", "deep-task", [("z", [9])], task_path="~__pregel_pull, child"),
    get("root_latest", "t1"),
    get("sub_latest", "t1", ns="parent:3f2a"),
    get("deep_latest", "t1", ns="parent:3f2a|child:9b1c"),
    get("deep0_in_root", "t1", checkpoint="deep0", note="a subgraph's checkpoint id asked for in the root namespace"),
    get("deep0_by_id", "t1", ns="parent:3f2a|child:9b1c", checkpoint="deep0"),
    get("no_such_ns", "t1", ns="parent:3f2a|child"),
    lst("every_ns", "t1"),
    lst("every_ns_limit_2", "t1", limit=2),
    lst("every_ns_before_deep1", "t1", before="deep1"),
    lst("sub_only", "t1", ns="parent:3f2a"),
    put("t2", "other0", {"x": "kept"}),
    {"op": "saver_delete_thread", "thread": "t1"},
    get("root_after_delete", "t1"),
    get("deep_after_delete", "t1", ns="parent:3f2a|child:9b1c"),
    lst("after_delete", "t1"),
])

w("saver_list_filter", {"description": "list with a metadata filter, before and limit: equal values of other types (1 vs 1.0, true vs 1, null vs a missing key), an object or a list that holds the filter's value but is not equal to it, a nested value, a NUL, several keys, and limit 0.", **R}, [
    put("t1", "c0", {"x": 0}, metadata={"source": "input", "step": -1, "kind": "a", "n": 1, "flag": True, "tags": ["red", "blue"], "obj": {"k": 1, "extra": 2}, "nul": "a\u0000b", "none": None}),
    put("t1", "c1", {"x": 1}, metadata={"kind": "b", "n": 1.0, "flag": 1, "tags": ["red"], "obj": {"k": 1}, "nul": "a"}),
    put("t1", "c2", {"x": 2}, metadata={"kind": "a", "n": 2, "flag": False, "tags": [], "obj": {}, "nul": "a\u0000c"}),
    put("t1", "c3", {"x": 3}, metadata={"kind": "A", "n": 10**18 + 1, "nested": {"deeper": {"v": "é"}}}),
    lst("kind_a", "t1", filter={"kind": "a"}),
    lst("kind_a_limit_1", "t1", filter={"kind": "a"}, limit=1),
    lst("kind_a_before_c2", "t1", filter={"kind": "a"}, before="c2"),
    lst("n_int", "t1", filter={"n": 1}),
    lst("n_float", "t1", filter={"n": 1.0}),
    lst("n_big", "t1", filter={"n": 10**18 + 1}),
    lst("flag_true", "t1", filter={"flag": True}),
    lst("flag_one", "t1", filter={"flag": 1}),
    lst("tags_red", "t1", filter={"tags": ["red"]}, note="c1 holds exactly ['red']; c0 holds it among others"),
    lst("tags_empty", "t1", filter={"tags": []}),
    lst("obj_k", "t1", filter={"obj": {"k": 1}}, note="c1 holds exactly {'k': 1}; c0 holds more keys"),
    lst("obj_empty", "t1", filter={"obj": {}}),
    lst("none_null", "t1", filter={"none": None}, note="only c0 holds the key, as null"),
    lst("nested", "t1", filter={"nested": {"deeper": {"v": "é"}}}),
    lst("nul", "t1", filter={"nul": "a\u0000b"}),
    lst("two_keys", "t1", filter={"kind": "a", "n": 2}),
    lst("source_loop", "t1", filter={"source": "loop"}),
    lst("step_3", "t1", filter={"step": 3}),
    lst("limit_0", "t1", limit=0),
    lst("before_c0", "t1", before="c0"),
    lst("no_match", "t1", filter={"kind": "zzz"}),
])

NUL = "nul\u0000inside"
DEEP_LIST = 0
for _ in range(300): DEEP_LIST = [DEEP_LIST]
DEEP_OBJ = {"leaf": True}
for i in range(300): DEEP_OBJ = {"d": DEEP_OBJ}
BIG = "x" * (256 * 1024)
DEEP100 = {"leaf": [1, "end"]}
for i in range(100): DEEP100 = {"d": DEEP100}
w("saver_hostile_values", {"description": "Values that broke other stores, in channel values, in pending writes and in metadata, each in a thread of its own: NUL, -0.0, 1e300, 5e-324, 64-bit integers, an integer and a float of equal value, 100 and 300 levels of nesting, 256 KiB of text, astral characters and a NUL in a key.", **R}, [
    put("t1", "c0", {"neg_zero": -0.0, "huge": 1e300, "tiny": 5e-324, "max_int": 2**63 - 1, "min_int": -2**63, "one": 1, "one_f": 1.0, "astral": "\U0001F600 \u00e9 e\u0301", "empty": "", "in_list": [-0.0, 1e300, 1.0]}, metadata={"source": "input", "step": -1}),
    writes("c0", "task-1", [("neg_zero", -0.0), ("huge", 1e300), ("max_int", 2**63 - 1), ("one_f", 1.0)]),
    put("nul", "n0", {"nul": NUL}),
    writes("n0", "task-nul", [("nul", NUL)]),
    put("nul_nested", "nn0", {"nul_key": {"a\u0000b": 1}, "nul_in": {"s": NUL}}),
    put("t1", "c1", {"neg_zero": 0.0, "one": 1.0}, note="a later step changes only the type or sign"),
    put("deep100", "d100", {"deep": DEEP100}),
    writes("d100", "task-deep", [("deep", DEEP100)]),
    put("deep_list", "dl", {"deep_list": DEEP_LIST}),
    put("deep_obj", "do", {"deep_obj": DEEP_OBJ}),
    put("big", "b0", {"big": BIG}),
    writes("b0", "task-big", [("big", BIG)]),
    put("meta_nul", "mn0", {"x": 1}, metadata={"nested_nul": {"s": NUL}}),
    put("meta", "m0", {"x": 1}, metadata={"neg_zero": -0.0, "huge": 1e300, "max_int": 2**63 - 1, "one_f": 1.0, "astral": "\U0001F600"}),
    put("meta_deep100", "md100", {"x": 1}, metadata={"deep": DEEP100}),
    put("meta_deep300", "md300", {"x": 1}, metadata={"deep": DEEP_OBJ}),
    writes("m0", "task-deep300", [("deep", DEEP_OBJ)]),
    get("c0_now", "t1", checkpoint="c0"),
])

w("saver_metadata_nul", {"description": "A NUL in a checkpoint's metadata string (top level and nested) and in a channel value is read back as it was put.", "expected_everywhere": True, "expected": {"threads": {"t1": {"namespaces": {"": {"latest": {"metadata": {"top": "a\u0000b", "nested": {"s": "a\u0000b"}}, "values": {"v": "a\u0000b"}}}}}}}}, [
    put("t1", "c0", {"v": "a\u0000b"}, metadata={"top": "a\u0000b", "nested": {"s": "a\u0000b"}}),
])

w("saver_hostile_ids", {"description": "Thread ids, namespaces, task ids and checkpoint ids that differ only by letter case, Unicode normal form or a trailing space are different threads, namespaces, tasks and checkpoints; deleting one thread leaves the others.", **R}, [
    put("upper", "u0", {"who": "Ada"}, thread_id="Ada"),
    put("lower", "l0", {"who": "ada"}, thread_id="ada"),
    put("nfc", "n0", {"who": "nfc"}, thread_id="caf\u00e9"),
    put("nfd", "d0", {"who": "nfd"}, thread_id="cafe\u0301"),
    put("space", "s0", {"who": "space"}, thread_id="ada "),
    put("lower", "l_ns", {"who": "ns lower"}, ns="sub:x", parent=None),
    put("lower", "l_NS", {"who": "ns upper"}, ns="SUB:x", parent=None),
    writes("l0", "Task", [("v", "upper task")]),
    writes("l0", "task", [("v", "lower task")]),
    writes("l0", "t\u00e2che", [("v", "nfc task")]),
    writes("l0", "ta\u0302che", [("v", "nfd task")]),
    put("ids", "idA", {"k": "A"}, thread_id="ids", checkpoint_id="A"),
    put("ids", "ida", {"k": "a"}, checkpoint_id="a"),
    put("ids", "idB", {"k": "B"}, checkpoint_id="B"),
    get("ids_A", "ids", checkpoint="idA"),
    get("ids_latest", "ids"),
    lst("ids_before_a", "ids", before="ida"),
    {"op": "saver_delete_thread", "thread": "upper"},
    {"op": "saver_delete_thread", "thread": "nfd"},
    get("lower_after", "lower"),
    get("nfc_after", "nfc"),
    get("space_after", "space"),
])

w("saver_forks", {"description": "Time travel as a graph does it: a step forked from an older checkpoint, a second root in the same thread, explicit channel versions (strings and integers), and channels kept unchanged across steps; the latest is the newest id, whatever its parent.", **R}, [
    put("t1", "c0", {"a": 1, "b": "x"}, metadata={"source": "input", "step": -1}),
    put("t1", "c1", {"a": 2}),
    put("t1", "c2", {"a": 3}),
    put("t1", "fork", {"b": "forked"}, parent="c0", note="a step from c0 again: it keeps c0's a"),
    put("t1", "root2", {"c": True}, parent=None),
    put("t1", "explicit", {"a": 9, "b": "v"}, versions={"a": "00000000000000000000000000000099.0", "b": 7}),
    put("t1", "after_explicit", {"c": False}),
    get("fork_by_id", "t1", checkpoint="fork"),
    get("latest", "t1"),
    lst("before_fork", "t1", before="fork"),
    lst("limit_3", "t1", limit=3),
])
