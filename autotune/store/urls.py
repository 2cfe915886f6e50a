"""Store URLs as they are printed: the password masked, everywhere.

Every message, error, log line and ``next:`` hint that names a store shows
:func:`masked_url` (SQLAlchemy's ``render_as_string(hide_password=True)``: ``user:***@host``),
and every exception text from a database driver goes through :func:`scrub` first, since
psycopg's and SQLAlchemy's messages can quote the URL or its password.
"""

from __future__ import annotations

import re
from urllib.parse import quote, quote_plus

_USERINFO = re.compile(r"(://[^/:@\s]*):[^@/\s]*@")


def masked_url(url: str) -> str:
    """``url`` with its password shown as ``***``; an unparsable one with any
    ``user:secret@`` masked by pattern."""
    from sqlalchemy.engine import make_url

    try:
        return str(make_url(url).render_as_string(hide_password=True))
    except Exception:  # not a URL SQLAlchemy reads: mask by pattern
        return _USERINFO.sub(r"\1:***@", url)


def secrets_of(url: str) -> list[str]:
    """The password of ``url`` in every spelling a message may carry (as given, decoded,
    percent-encoded)."""
    from sqlalchemy.engine import make_url

    found: set[str] = set()
    match = _USERINFO.search(url)
    if match:
        found.add(match.group(0)[len(match.group(1)) + 1 : -1])
    try:
        password = make_url(url).password
    except Exception:
        password = None
    if password:
        found |= {str(password), quote(str(password), safe=""), quote_plus(str(password))}
    return sorted((s for s in found if s and s != "***"), key=len, reverse=True)


def scrub(text: str, *urls: str) -> str:
    """``text`` with each URL replaced by its masked form and any of their passwords by
    ``***``."""
    for url in urls:
        if not url:
            continue
        text = text.replace(url, masked_url(url))
        for secret in secrets_of(url):
            text = text.replace(secret, "***")
    return _USERINFO.sub(r"\1:***@", text)
