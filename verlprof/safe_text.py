"""Text that comes from a report, a manifest, a config or a host is data: how each output shows it.

Range names come from user code (any ``annotate`` label, verl's roles, torch ops) and paths,
hosts and reasons from files someone else may have written, so every renderer passes them
through one of the functions here and never lets them act as code in its medium:

- :func:`visible`: the text with every control, format (bidi, zero-width), separator and lone
  surrogate character written as a Python-style escape (``\\x1b``, ``\\u202e``), so that
  nothing reaches a terminal, a page or a picture that moves the cursor, reorders the line or
  is invisible. The terminal, the HTML page and the PNG show this form (the terminal through
  rich ``Text``, never markup; the page through ``textContent``, never ``innerHTML``).
- :func:`md_text`: :func:`visible`, then Markdown and HTML syntax escaped (``summary.md``).
- :func:`csv_cell`: the raw value, prefixed with ``'`` when a spreadsheet would evaluate it
  (OWASP's rule); :func:`csv_raw` undoes it (``summary.csv``).
- :func:`shell_quote`: a path or argument as a shell word that is both visible and runnable
  (next-step hints, the plan's launch commands).
- :func:`stand_in`: a stable, visible name for a name that cannot be shown at all (empty,
  nothing printable, or too long); ``verlprof report`` uses it and warns.
- :func:`one_line`: a message (an exception's, a tool's) on one line, for the errors and
  reasons that must stay one line (a Ray error carries a whole traceback).

No verlprof import: the report and the plan's tables both use it (docs/architecture.md).
"""

from __future__ import annotations

import hashlib
import re
import shlex
import unicodedata
from typing import Iterable, Optional

HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
"""Unicode categories written as escapes: controls (C0, DEL, C1), format characters (bidi
overrides and isolates, zero-width characters, the BOM, soft hyphen), lone surrogates (a JSON
``\\ud800`` decodes to one, and no UTF-8 file can hold it) and line/paragraph separators."""
_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}
MAX_NAME_CHARS = 200
"""Longest name shown as it is (after :func:`visible`); a longer one gets a stand-in."""
STAND_IN_PREFIX_CHARS = 48
"""How much of a too-long name its stand-in keeps, so that it stays recognisable."""
ELLIPSIS = "…"
CSV_TRIGGERS = ("=", "+", "-", "@", "\t", "\r", "'")
"""First characters that make a cell a formula (OWASP's list), plus the quote itself so that
:func:`csv_raw` can always undo :func:`csv_cell` (a name that starts with ``'`` gets a second
one)."""
_NUMBER = re.compile(r"-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")
"""A negative number: a spreadsheet reads it as a number, so it is left alone."""
_MD_SPECIAL = re.compile(r"[\\`*\[\]|~]|(?<![^\W_])_|_(?![^\W_])")
"""Markdown syntax, escaped with a backslash: CommonMark's emphasis, code, link and escape
characters, GitHub's table pipe and strikethrough. ``_`` only where it could open or close
emphasis: ``update_actor`` stays readable (CommonMark ignores an ``_`` inside a word)."""
_MD_BLOCK_START = re.compile(r"^(?:[-+#]|\d{1,9}[.)](?=\s|$))")
"""What opens a block when it starts a line: a list item or a rule (``-``, ``+``; ``*`` is
escaped anyway), a heading, an ordered list item (``1.``, ``2)``); ``>`` is an entity
already. The backslash goes before its last character."""
_HTML = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}
_SURROGATE = re.compile("[\ud800-\udfff]")


def _escape_char(ch: str) -> str:
    named = _NAMED.get(ch)
    if named is not None:
        return named
    code = ord(ch)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def _hidden(ch: str) -> bool:
    return unicodedata.category(ch) in HIDDEN_CATEGORIES


def visible(text: str) -> str:
    """``text`` with every character that a reader could not see, or that would act on the
    terminal or the line's direction, written as an escape; printable text unchanged."""
    if text.isprintable():  # the common case, decided in C: nothing to escape
        return text
    return "".join(_escape_char(ch) if (ch != " " and _hidden(ch)) else ch for ch in text)


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, the last one an ellipsis when it was cut."""
    if limit < 1:
        return ""
    return text if len(text) <= limit else text[:limit - 1] + ELLIPSIS


def digest(text: str) -> str:
    """Eight hex digits that identify ``text`` (stable across runs and machines)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]


def unshowable(name: str) -> Optional[str]:
    """Why ``name`` cannot be shown (``empty``, ``nothing printable``, ``N characters
    long``), or None when it can (through :func:`visible`)."""
    if name == "":
        return "empty"
    if all(ch.isspace() or _hidden(ch) for ch in name):
        return "nothing printable"
    if len(name) > MAX_NAME_CHARS or len(visible(name)) > MAX_NAME_CHARS:
        return f"{len(name)} characters long"
    return None


def stand_in(name: str) -> Optional[str]:
    """None when ``name`` can be shown (through :func:`visible`); else its stand-in.

    Empty names, names with nothing printable (only controls, format characters or spaces)
    and names longer than :data:`MAX_NAME_CHARS` once visible cannot be shown usefully; their
    stand-in is stable (the same name always gets the same one, from a hash of it), visible,
    and says what the name was: ``(empty name)``, ``(unprintable name #1a2b3c4d)``,
    ``attn_…(1048576-character name #1a2b3c4d)``.
    """
    why = unshowable(name)
    if why is None:
        return None
    if why == "empty":
        return "(empty name)"
    if why == "nothing printable":
        return f"(unprintable name #{digest(name)})"
    head = visible(name[:STAND_IN_PREFIX_CHARS])[:STAND_IN_PREFIX_CHARS]
    return f"{head}{ELLIPSIS}({len(name)}-character name #{digest(name)})"


def without_surrogates(text: str) -> str:
    """Lone surrogates (no UTF-8 file can hold one) replaced by U+FFFD, as a decoder with
    ``errors="replace"`` does for bytes that are not UTF-8."""
    return text if text.isprintable() else _SURROGATE.sub("\ufffd", text)


def md_text(text: object) -> str:
    """``text`` for Markdown, in a table cell or after a list marker: visible, with Markdown
    syntax (``|``, backticks, emphasis, links) backslash-escaped, HTML's ``& < > "`` as
    entities, a leading block marker (``-``, ``+``, ``#``, ``1.``) escaped and
    outer spaces as character references (Markdown would trim them, or read four of them as
    code), so a renderer shows the characters and never a tag, a link, a list or a code span."""
    shown = _MD_SPECIAL.sub(lambda m: "\\" + m.group(0), visible(str(text)))
    shown = "".join(_HTML.get(ch, ch) for ch in shown)
    body = shown.strip()
    if not body:
        return "".join(f"&#{ord(ch)};" for ch in shown)
    lead, trail = shown[:len(shown) - len(shown.lstrip())], shown[len(shown.rstrip()):]
    body = _MD_BLOCK_START.sub(lambda m: m.group(0)[:-1] + "\\" + m.group(0)[-1], body,
                               count=1)
    return ("".join(f"&#{ord(ch)};" for ch in lead) + body
            + "".join(f"&#{ord(ch)};" for ch in trail))


def csv_cell(value: object) -> str:
    """A CSV cell holding ``value`` that no spreadsheet evaluates.

    OWASP's rule: a cell that starts with ``=``, ``+``, ``-`` (unless the whole cell is a
    negative number), ``@``, a tab or a carriage return is a formula to Excel, LibreOffice and
    Google Sheets, so it gets a leading ``'``, which they show as text. A cell that already
    starts with ``'`` gets one too, so :func:`csv_raw` recovers every value exactly. Lone
    surrogates become U+FFFD (a UTF-8 file cannot hold them).
    """
    text = without_surrogates(str(value))
    if text.startswith(CSV_TRIGGERS) and not _NUMBER.fullmatch(text):
        return "'" + text
    return text


def csv_raw(cell: str) -> str:
    """The value :func:`csv_cell` was given: one leading ``'`` dropped, if any."""
    return cell[1:] if cell.startswith("'") else cell


def shell_quote(word: str) -> str:
    """``word`` as one shell word, visible and runnable: ``shlex.quote`` when every character
    is printable, else bash's ``$'...'`` with each hidden character as the ``\\xHH`` escapes
    of its UTF-8 bytes (the bytes themselves, whatever the locale; a byte that was not UTF-8,
    decoded by ``os.fsdecode``, as that byte). A hint never writes an escape sequence to the
    terminal, and pasting it still names the right file."""
    if visible(word) == word:
        return shlex.quote(word)
    out = []
    for ch in word:
        if ch in "\\'":
            out.append("\\" + ch)
        elif ch != " " and _hidden(ch):
            raw = ch.encode("utf-8", "surrogateescape" if "\udc80" <= ch <= "\udcff"
                            else "surrogatepass")
            out.append("".join(f"\\x{byte:02x}" for byte in raw))
        else:
            out.append(ch)
    return "$'" + "".join(out) + "'"


def shell_join(argv: Iterable[str]) -> str:
    """A command line of :func:`shell_quote` words."""
    return " ".join(shell_quote(arg) for arg in argv)


def one_line(message: object, limit: Optional[int] = None) -> str:
    """``message`` with every run of whitespace (newlines included) one space, cut to
    ``limit`` characters when given."""
    text = " ".join(str(message).split())
    return text if limit is None else text[:limit]
