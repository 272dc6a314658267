"""Chinese pages use the glossary's one term per concept, and both glossaries agree on it."""

from __future__ import annotations

import json
import re

import pytest
from docs_support import DOCS, NOTEBOOKS

GLOSSARY = "reference/glossary.md"
_ROW = re.compile(r"^\| (?P<en>[^|]+?) \| (?P<zh>[^|]+?) \| .* \|$", re.M)

# Words the Chinese pages used before the glossary fixed a term (regular expressions),
# and what replaced them.
RETIRED = {
    "外部接收端": "副作用记录文件 (effect sink)",
    "重放出现差异": "回放结果出现差异 (replay-diff)",
    "崩溃测试工具(?!包)": "崩溃测试工具包 (crash kit)",
    "搭[^，。：；]{0,12}便车": "plain words: the metaphor does not carry over",
    "重放策略": "重复执行策略 (ReplayPolicy)",
    "残尾": "残缺尾行 (torn tail)",
    "撕裂写入": "部分写入 (torn write)",
    "预写日志": "先记录后执行的日志 (the tagline) or 预写式日志（WAL） (SQLite's WAL)",
    "发现包": "反馈包 (packet)",
    "前言": "前置说明 (preamble)",
    "并列许可": "同分豁免 (tie allowance)",
    "先睹为快": "a plain heading",
    "定点投放": "plain words: 在指定时刻 (aimed, of a SIGKILL)",
    "sink ?文件": "副作用记录文件 (effect sink)",
    "重放(?=被测存储|用例|比对)": "回放 (replay, of a case; 重放 is workflow replay)",
    "entry point ?组": "入口点组 (an entry point group)",
    "嵌入式(?:日志|后端)": "内嵌日志、内嵌后端 (embedded journal, backend)",
}


def _rows(lang: str) -> dict[str, str]:
    text = (DOCS / lang / GLOSSARY).read_text(encoding="utf-8")
    return {m["en"]: m["zh"] for m in _ROW.finditer(text) if m["en"] not in {"term", "英文"}}


def _chinese_texts() -> list[tuple[str, str]]:
    texts = [
        (str(p.relative_to(DOCS)), p.read_text(encoding="utf-8"))
        for p in (DOCS / "zh").rglob("*.md")
    ]
    for path in sorted((NOTEBOOKS / "zh").glob("*.ipynb")):
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        prose = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
        texts.append((str(path.relative_to(NOTEBOOKS)), prose))
    return texts


def test_both_glossaries_give_the_same_chinese_terms() -> None:
    """The English glossary's 中文 column and the Chinese glossary name the same term."""
    en, zh = _rows("en"), _rows("zh")
    assert len(en) >= 60
    assert en == zh


TEXTS = _chinese_texts()


@pytest.mark.parametrize(("where", "text"), TEXTS, ids=[where for where, _ in TEXTS])
def test_chinese_pages_use_the_glossary_terms(where: str, text: str) -> None:
    """No Chinese page or notebook uses a term the glossary retired."""
    if where.endswith(GLOSSARY):
        return
    found = {old: new for old, new in RETIRED.items() if re.search(old, text)}
    assert not found, f"{where}: use {found}"
