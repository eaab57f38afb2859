"""verlprof.safe_text: the escaping rules every output uses for text that is data (issue 19)."""

from __future__ import annotations

import os
import subprocess
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from tests.hostile import CRAFTED, names
from verlprof.safe_text import (
    HIDDEN_CATEGORIES,
    MAX_NAME_CHARS,
    csv_cell,
    csv_raw,
    md_text,
    shell_quote,
    stand_in,
    visible,
    without_surrogates,
)

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def evaluates(cell: str) -> bool:
    """Would a spreadsheet read this cell as a formula? (OWASP's first characters; a negative
    number is a number.)"""
    if not cell.startswith(FORMULA_STARTS):
        return False
    try:
        float(cell)
    except ValueError:
        return True
    return not cell.startswith(("+", "-")) or cell[1:2] in ("i", "n", "I", "N")  # inf, nan


def hidden(text: str) -> list:
    return [ch for ch in text if ch != " " and unicodedata.category(ch) in HIDDEN_CATEGORIES]


@given(names)
def test_visible_leaves_nothing_hidden_and_printable_text_alone(name):
    shown = visible(name)
    assert not hidden(shown)
    if not hidden(name):
        assert shown == name
    shown.encode("utf-8")  # no lone surrogate left: any UTF-8 file or terminal can hold it


def test_visible_writes_escapes_a_reader_recognises():
    assert visible("a\x1b[31mb\x07\tc\n") == "a\\x1b[31mb\\x07\\tc\\n"
    assert visible("\u202eevil\u2069") == "\\u202eevil\\u2069"
    assert visible("日本語 é 🤖 [/] <b>") == "日本語 é 🤖 [/] <b>"


@given(names)
def test_a_stand_in_is_stable_visible_short_and_only_for_names_that_need_one(name):
    replacement = stand_in(name)
    if replacement is None:
        assert name.strip() and len(visible(name)) <= MAX_NAME_CHARS
        return
    assert replacement == stand_in(name)
    assert replacement.strip() and not hidden(replacement) and len(replacement) < 120
    assert stand_in(replacement) is None  # a stand-in is itself a showable name


def test_stand_ins_say_what_the_name_was():
    assert stand_in("") == "(empty name)"
    assert stand_in("\x1b\u202e ").startswith("(unprintable name #")
    long = stand_in("M" * 100_000)
    assert long is not None and long.startswith("M" * 48) and "100000-character name #" in long
    assert stand_in("M" * 100_000 + "x") != long  # same start, other name: another stand-in
    assert stand_in("update_actor") is None


@given(names)
def test_csv_cell_never_evaluates_and_csv_raw_recovers_the_value(name):
    cell = csv_cell(name)
    assert not evaluates(cell)
    assert csv_raw(cell) == without_surrogates(name)


def test_csv_cell_follows_owasp():
    assert csv_cell('=HYPERLINK("x","update")') == '\'=HYPERLINK("x","update")'
    assert [csv_cell(v) for v in ("+1", "-x", "@A1", "\tx", "\rx", "'x")] == [
        "'+1", "'-x", "'@A1", "'\tx", "'\rx", "''x"]
    assert [csv_cell(v) for v in ("-1.5", "-2", "1.5", 3, "update_actor", "a=b")] == [
        "-1.5", "-2", "1.5", "3", "update_actor", "a=b"]


MD = MarkdownIt("commonmark").enable("table").enable("strikethrough")


def _inline_text(children) -> str:
    """The text a Markdown renderer shows for inline tokens; fails on anything but text."""
    out = []
    for token in children:
        assert token.type in ("text", "softbreak"), (token.type, token.content)
        out.append(token.content if token.type == "text" else "\n")
    return "".join(out)


def _contents(tokens, opener: str) -> list:
    """The inline text of every block that ``opener`` opens (``td_open``, ``list_item_open``):
    "" for an empty one."""
    out = []
    for i, token in enumerate(tokens):
        if token.type == opener:
            nxt = next((t for t in tokens[i + 1:] if t.type in ("inline", opener,
                                                                 opener.replace("open", "close"))),
                       None)
            out.append(_inline_text(nxt.children) if nxt is not None and nxt.type == "inline"
                       else "")
    return out


@given(names)
@settings(max_examples=150)
def test_md_text_renders_as_the_visible_text_in_a_table_cell_and_a_list(name):
    source = f"| a | b |\n| --- | --- |\n| x | {md_text(name)} |\n\n- {md_text(name)}\n"
    tokens = MD.parse(source)
    assert _contents(tokens, "td_open") == ["x", visible(name)]
    assert _contents(tokens, "list_item_open") == [visible(name)]
    html = MD.render(source)
    assert "<img" not in html and "<script" not in html and "<a " not in html


ARGV_WORDS = [(i, w) for i, w in enumerate(CRAFTED) if "\x00" not in w]
"""The crafted names an argv can carry (none can hold NUL). bash is no optional tool: the
Makefile and scripts/ run on it."""


@pytest.mark.parametrize("word", [w for _, w in ARGV_WORDS], ids=[i for i, _ in ARGV_WORDS])
def test_shell_quote_is_visible_and_bash_reads_back_the_same_bytes(word):
    if len(word) > 50_000:
        word = word[:1000]
    quoted = shell_quote(word)
    assert not hidden(quoted)
    raw = os.fsencode(word.replace("\ud800", "\ufffd"))  # a lone surrogate names no file
    out = subprocess.run(["bash", "-c", f"printf %s {shell_quote(os.fsdecode(raw))}"],
                         capture_output=True, timeout=20)
    assert out.returncode == 0 and out.stdout == raw


@given(st.text(max_size=30))
def test_shell_quote_is_shlex_quote_for_printable_words(word):
    import shlex

    if not hidden(word):
        assert shell_quote(word) == shlex.quote(word)
