"""MkDocs hook: the ``Example:`` block of a click help text stays a block of commands.

mkdocs-click renders a command's help as Markdown, where the lines of click's ``\\b`` example
block run together into one paragraph; this turns each such paragraph of the rendered page back
into a code block, one command a line, as ``autotune COMMAND --help`` prints it.
"""

from __future__ import annotations

import html
import re
from typing import Any

EXAMPLE = re.compile(r"<p>Example:\n(.*?)</p>", re.S)


def _block(match: re.Match[str]) -> str:
    lines = [html.unescape(line.strip()) for line in match.group(1).splitlines() if line.strip()]
    code = html.escape("\n".join(lines), quote=False)
    return f'<p>Example:</p>\n<pre><code class="language-sh">{code}\n</code></pre>'


def on_page_content(html_text: str, **kwargs: Any) -> str:
    """Rewrite every example paragraph of a page as a code block."""
    return EXAMPLE.sub(_block, html_text)
