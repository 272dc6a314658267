"""MkDocs hook: long inline identifiers may wrap at their dots and underscores, never mid-word.

Material lets inline code break anywhere (``word-break: break-word``), so a narrow table
column shows ``effect.inte`` / ``nt``. ``assets/stylesheets/site.css`` turns that off for
tables; here every inline ``<code>`` of 12 characters or more gets a ``<wbr>`` (a line
break opportunity that adds no character: copying and search see the same text) after
each ``.``, ``_``, ``/`` and ``=`` inside it, so ``RESUME_STATE_UNKNOWN`` can still wrap
as ``RESUME_`` / ``STATE_UNKNOWN`` where the column is too narrow for it.
"""

from __future__ import annotations

import re
from typing import Any

from mkdocs import plugins

# Inline code only: a code block's <code> follows <pre> (and Pygments' empty <span>).
_INLINE_CODE = re.compile(r"(?<!<pre>)(?<!</span>)<code>([^<]{12,})</code>")
_BREAK_AFTER = re.compile(r"(?<=[._/=])(?=[^._/=])")


def soft_breaks(html: str) -> str:
    """Add a ``<wbr>`` after each separator of every long inline code span."""
    return _INLINE_CODE.sub(
        lambda m: "<code>" + _BREAK_AFTER.sub("<wbr>", m.group(1)) + "</code>", html
    )


@plugins.event_priority(-50)  # after the hooks that generate page content
def on_page_content(html: str, **kwargs: Any) -> str:
    """Let long identifiers wrap at their separators."""
    return soft_breaks(html)
