"""Find the fenced code blocks of the documentation, and run shell command lines in-process.

Every fenced block in a documented Markdown file must name its language; the language decides
what the tests do with it (see ``test_snippets.py``):

``bash``        every command runs (exceptions listed there, each with its reason)
``yaml``        loaded with ``config_from_dict`` and planned with ``build_plan``
``python``      executed in order per file; its printed output must equal a ``text`` block
                right after it; blocks that need a Ray cluster are compiled and their imports
                resolved instead
``json``        parsed; a manifest entry must build a ``ReportEntry``
``dockerfile``  linted with hadolint
``text``        output shown to the reader. Right after a ``bash`` or ``python`` block it is
                that block's output and must equal what the block prints (normalised by
                :func:`normalise`). A ``<!-- output: excerpt -->`` line (or ``excerpt: <why>``)
                before its fence makes it an excerpt: its lines must appear in that order in
                the real output.
                Any other ``text`` block (a diagram, a directory layout, output of a run the
                tests do not repeat) says so with ``<!-- output: illustrative: <why> -->``.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

DOC_FILES: Tuple[str, ...] = ("README.md", "docker/README.md")
"""Documented Markdown files outside ``docs/`` (every ``docs/*.md`` is included too)."""

LANGUAGES = ("bash", "yaml", "python", "json", "dockerfile", "text")

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>```+)(?P<lang>[^\s`]*)\s*$")
_EXIT = re.compile(r"#\s*exits\s+(\d+)")
_ENV = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_MARKER = re.compile(r"^\s*<!--\s*output:\s*(?P<what>.*?)\s*-->\s*$")

DOCS_ROOT = "/work/main"
"""The repository root as the docs' shown output spells it (where they were generated)."""


@dataclass(frozen=True)
class Block:
    """One fenced block: where it is, its language and its text (indentation removed)."""

    path: str
    """Path relative to the repository root."""
    line: int
    """1-based line of the opening fence."""
    lang: str
    text: str
    after: Optional[Block] = None
    """The next block of the same file when nothing but blank lines (and an output marker)
    separates them."""
    marker: str = ""
    """What ``<!-- output: ... -->`` on the line before the fence says (``excerpt``,
    ``excerpt: <why>``, ``illustrative: <why>``), else empty."""

    @property
    def illustrative(self) -> bool:
        return self.marker.startswith("illustrative")

    @property
    def excerpt(self) -> bool:
        return self.marker == "excerpt" or self.marker.startswith("excerpt:")

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


def doc_files() -> List[str]:
    docs = sorted(os.path.join("docs", n) for n in os.listdir(os.path.join(ROOT, "docs"))
                  if n.endswith(".md"))
    return list(DOC_FILES) + docs


def blocks(path: str) -> List[Block]:
    """The fenced blocks of ``path`` (relative to the root), in order."""
    with open(os.path.join(ROOT, path), encoding="utf-8") as handle:
        lines = handle.read().splitlines()
    found: List[Tuple[int, str, str, int, str]] = []  # (line, lang, text, closing, marker)
    i = 0
    while i < len(lines):
        match = _FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        indent, fence = match.group("indent"), match.group("fence")
        body: List[str] = []
        j = i + 1
        while j < len(lines) and lines[j].strip() != fence:
            line = lines[j]
            body.append(line[len(indent):] if line.startswith(indent) else line.lstrip())
            j += 1
        if j >= len(lines):
            raise ValueError(f"{path}:{i + 1}: unclosed code fence")
        before = [line for line in lines[:i] if line.strip()][-1:]
        marker = _MARKER.match(before[0]) if before else None
        found.append((i + 1, match.group("lang"), "\n".join(body) + "\n", j + 1,
                      marker.group("what") if marker else ""))
        i = j + 1
    out: List[Block] = []
    for k in range(len(found) - 1, -1, -1):
        line, lang, text, end, marker = found[k]
        after = None
        if k + 1 < len(found):
            gap = lines[end:found[k + 1][0] - 1]
            if all(not g.strip() or _MARKER.match(g) for g in gap):
                after = out[0]
        out.insert(0, Block(path, line, lang, text, after, marker))
    return out


def all_blocks() -> List[Block]:
    return [b for path in doc_files() for b in blocks(path)]


@dataclass(frozen=True)
class Command:
    """One shell command line of a ``bash`` block."""

    env: Dict[str, str]
    argv: List[str]
    expect_rc: int
    text: str


def commands(block_text: str) -> List[Command]:
    """Split a simple block into commands: continuation lines joined, ``# exits N`` read,
    leading ``VAR=value`` words taken as the command's environment."""
    joined: List[str] = []
    pending = ""
    for raw in block_text.splitlines():
        line = raw.rstrip()
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        joined.append(pending + line)
        pending = ""
    out = []
    for line in joined:
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = _EXIT.search(line)
        words = shlex.split(line, comments=True)
        env: Dict[str, str] = {}
        while words and _ENV.match(words[0]):
            name, _, value = words.pop(0).partition("=")
            env[name] = value
        out.append(Command(env, words, int(match.group(1)) if match else 0, line.strip()))
    return out


def needs_shell(block_text: str) -> bool:
    """True when the block uses shell syntax outside quotes (heredoc, pipe, redirect, ``;``,
    ``&&``, ``$(...)``): such a block runs in bash as a whole."""
    for line in block_text.replace("\\\n", " ").splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        try:
            tokens = list(lexer)
        except ValueError:  # an unclosed quote: a heredoc body, say
            return True
        if any(t and set(t) <= set("|&;<>()") for t in tokens):
            return True
    return False


@contextlib.contextmanager
def environment(cwd: str, env: Dict[str, str], clear_prefixes: Sequence[str] = ("NRL_",)
                ) -> Iterator[None]:
    """Run in ``cwd`` with ``env`` added and variables starting with ``clear_prefixes``
    removed; everything restored afterwards."""
    saved_env = dict(os.environ)
    saved_cwd = os.getcwd()
    try:
        for name in list(os.environ):
            if name.startswith(tuple(clear_prefixes)):
                del os.environ[name]
        os.environ.update(env)
        os.chdir(cwd)
        yield
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)


_VARYING = (
    (re.compile(r"host=\S+ pid=\d+"), "host=<host> pid=<pid>"),
    (re.compile(r"\b\d+(\.\d+)? s\b"), "<seconds> s"),
)
"""What differs from run to run in a shown output, and what it is shown as once normalised."""


def normalise(text: str, workspace: str) -> List[str]:
    """Lines of ``text`` as the docs show them: the scratch workspace spelled
    :data:`DOCS_ROOT`, hosts, pids and timings replaced, trailing blanks and blank lines at
    either end dropped."""
    text = text.replace(os.path.realpath(workspace), DOCS_ROOT).replace(workspace, DOCS_ROOT)
    for pattern, shown in _VARYING:
        text = pattern.sub(shown, text)
    lines = [line.rstrip() for line in text.splitlines()]
    while lines and not lines[0]:
        lines.pop(0)
    while lines and not lines[-1]:
        lines.pop()
    return lines


def output_differs(shown: Block, real: str, workspace: str) -> Optional[str]:
    """Why the ``text`` block ``shown`` is not the output ``real`` (None when it is)."""
    want, got = normalise(shown.text, workspace), normalise(real, workspace)
    if not shown.excerpt:
        if want == got:
            return None
        return f"{shown.where}: the output shown differs from the real output:\n" + \
            "\n".join(got)
    rest = iter(got)
    for line in [w for w in want if w]:
        if not any(line == g for g in rest):
            return f"{shown.where}: the excerpt's line {line!r} is not in the real output " \
                   "(in this order):\n" + "\n".join(got)
    return None


def run_verlprof(argv: Sequence[str], env: Dict[str, str], cwd: str) -> Tuple[int, str, str]:
    """``verlprof <argv>`` in this process (as ``verlprof.cli.main``): (exit code, out, err)."""
    from verlprof.cli import main

    out, err = io.StringIO(), io.StringIO()
    with environment(cwd, env), contextlib.redirect_stdout(out), \
            contextlib.redirect_stderr(err):
        try:
            rc = main(list(argv))
        except SystemExit as exit_:
            rc = exit_.code if isinstance(exit_.code, int) else 1
    return rc, out.getvalue(), err.getvalue()


def run_python(code: str, namespace: dict, cwd: str, where: str) -> str:
    """Execute ``code`` in ``namespace`` (shared by the blocks of one file); return stdout."""
    out = io.StringIO()
    with environment(cwd, {}), contextlib.redirect_stdout(out):
        exec(compile(code, where, "exec"), namespace)  # noqa: S102 - the docs' own examples
    return out.getvalue()


def slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    text = re.sub(r"[`*_]{2,}|`", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: str) -> List[str]:
    """Anchors of every heading of ``path`` (outside code blocks)."""
    out = []
    in_code = False
    with open(os.path.join(ROOT, path), encoding="utf-8") as handle:
        for line in handle:
            if line.lstrip().startswith("```"):
                in_code = not in_code
            elif not in_code and line.startswith("#"):
                out.append(slug(line.lstrip("#")))
    return out


_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def links(path: str) -> List[Tuple[int, str]]:
    """(line, target) of every Markdown link and image outside code blocks."""
    out = []
    in_code = False
    with open(os.path.join(ROOT, path), encoding="utf-8") as handle:
        for n, line in enumerate(handle, start=1):
            if line.lstrip().startswith("```"):
                in_code = not in_code
                continue
            if not in_code:
                out += [(n, m.group(1)) for m in _LINK.finditer(line)]
    return out
