"""Hostile names for the tests of issue 19 ("names are data"): what a range name, a host or a
path may hold when it reaches an output, as a hypothesis strategy and as a fixed list."""

from __future__ import annotations

from typing import List

from hypothesis import strategies as st

CRAFTED: List[str] = [
    "critic/values<img src=x onerror=\"document.title='pwned'\">",  # HTML: an event handler
    "</script><script>document.title='pwned'</script>",  # ends the page's script
    "<!--<script>",  # script data double-escaped state
    "[/]", "attn[mask]", "[bold red]x[/bold red]", "[link=https://evil.example]y[/link]",  # rich
    "\\[escaped]", "trailing\\",
    '=HYPERLINK("https://evil.example","update")', "+1+cmd", "-x", "@SUM(A1)",  # formulas
    "\tlead tab", "\rlead cr", "'quoted", "-1.5", "-",
    "a|b`c`", "**bold** _em_ ~~s~~ [link](javascript:alert(1)) ![i](x)", "<b>&amp;</b>",  # md
    "\x1b[31mred\x1b[0m", "\x1b]8;;https://evil.example\x07link\x1b]8;;\x07", "bell\x07",  # tty
    "line\nbreak", "nul\x00byte", "\x7f\x9b",
    "\u202eevil\u202c", "\u2066isolate\u2069", "zero\u200bwidth", "\ufeffbom", "sep\u2028ara",
    "lone\ud800surrogate", "b\udcffyte",  # JSON "\ud800"; os.fsdecode of b"\xff"
    "", " ", "\x1b", "\u202e\u200b", "\t\n",  # nothing to show
    "L" * 250, "M" * 100_000,  # too long
    "__proto__", "constructor", "%(data)s", "{}", "$(touch /tmp/x)", "'; rm -rf ~; '",
    "日本語/名前", "e\u0301\u0301\u0301", "🤖" * 3,
]
"""Names chosen by hand: markup, HTML, formulas, Markdown, terminal codes, control and bidi
characters, lone surrogates, empty and blank, very long, and plain but unusual."""

_HIDDEN = st.sampled_from(["\x00", "\x07", "\x1b", "\t", "\n", "\r", "\x7f", "\x85", "\x9b",
                           "\u200b", "\u200e", "\u202a", "\u202e", "\u2066", "\u2069",
                           "\u2028", "\ufeff", "\ud800", "\udcff"])
_SYNTAX = st.sampled_from(list("<>&\"'`|[]/\\*_~#!=+-@%$();{}") + ["[/]", "</script>",
                                                                   "<!--", "-->", "&lt;"])


def _decoded(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")


names = st.one_of(
    st.sampled_from(CRAFTED),
    st.lists(st.one_of(_HIDDEN, _SYNTAX, st.text(max_size=4)), max_size=12).map("".join),
    st.binary(max_size=24).map(_decoded),  # not UTF-8: decoded with replacement, as readers do
    st.text(min_size=190, max_size=320),  # around the length where a stand-in takes over
)
"""Any of the above, mixed: the strategy every renderer's property test draws from."""
