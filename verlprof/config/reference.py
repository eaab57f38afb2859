"""Generate ``docs/config_reference.md`` from the docstrings under each field of the schema.

The schema (:mod:`verlprof.config.schema`) is parsed with :mod:`ast`, not imported: the text is
exactly what a reader of the source sees, in source order. Each field is listed under the YAML
key a user writes (seed layout), with the equivalent keys of verl's layouts and NeMo RL's
variables from :data:`KEYS`. Every schema field must appear in :data:`KEYS` (a test checks
that), so a new field cannot reach users undocumented.

::

    python -m verlprof.config.reference            # rewrite docs/config_reference.md
    python -m verlprof.config.reference --check    # exit 1 when the file is out of date
    python -m verlprof.config.reference -o -       # print to stdout
"""

from __future__ import annotations

import argparse
import ast
import difflib
import os
import sys
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

SCHEMA_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "schema.py")
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_OUTPUT = os.path.join(REPO_ROOT, "docs", "config_reference.md")

ROLE_SECTIONS: Dict[str, str] = {
    "actor": "actor_rollout_ref.actor",
    "rollout": "actor_rollout_ref.rollout",
    "ref": "actor_rollout_ref.ref",
    "critic": "critic",
    "rm": "reward_model",
}
"""Main YAML section of each role (aliases are listed in docs/config_sources.md)."""


@dataclass(frozen=True)
class Keys:
    """Where one schema field is set, in each input layout (empty: not settable there)."""

    seed: str
    """Key in verlprof's primary (seed) layout; ``<role>`` stands for a role section."""
    verl_profiler: str = ""
    """verl 2025-06/07 layout, when it differs from the seed key."""
    global_profiler: str = ""
    """verl 2025-08+ ``global_profiler`` layout, when it differs from the seed key."""
    nemo: str = ""
    """NeMo RL environment variable(s) that set it."""
    default: str = ""
    """The effective default when the schema's default is not what users get (Markdown)."""
    internal: bool = False
    """A block of other fields, or set by the loader: not a user setting."""


KEYS: Dict[str, Keys] = {
    "ProfilingConfig.steps": Keys(
        "trainer.profile_steps", global_profiler="`global_profiler.steps`",
        nemo="`NRL_NSYS_PROFILE_STEP_RANGE` or `NRL_TORCH_PROFILE_STEP_RANGE`"),
    "ProfilingConfig.continuous_steps": Keys(
        "trainer.profile_continuous_steps",
        global_profiler="`global_profiler.profile_continuous_steps`",
        nemo="always true: the step range is one window"),
    "ProfilingConfig.tool": Keys(
        "trainer.profiler.tool", global_profiler="`global_profiler.tool`",
        nemo="`nsys` when `NRL_NSYS_*` is set, `torch` when `NRL_TORCH_PROFILE_*` is"),
    "ProfilingConfig.enabled": Keys(
        "trainer.profiler.enabled", global_profiler="`global_profiler.tool: null` turns it off"),
    "ProfilingConfig.output_dir": Keys(
        "trainer.profiler.output_dir",
        global_profiler="`global_profiler.save_path` (`trainer.profiler.output_dir` wins)",
        nemo="`NRL_TORCH_PROFILE_DIR`",
        default="`<trainer.default_local_dir or outputs>/<trainer.experiment_name>/profiling`, "
                "made absolute"),
    "ProfilingConfig.filename_template": Keys("trainer.profiler.filename_template"),
    "ProfilingConfig.components": Keys("<role section>", internal=True),
    "ProfilingConfig.phases": Keys("trainer.profiler.phases"),
    "ProfilingConfig.nsys": Keys("trainer.profiler.nsys", internal=True),
    "ProfilingConfig.torch": Keys("trainer.profiler.torch", internal=True),
    "ProfilingConfig.rocprof_sys": Keys("trainer.profiler.rocprof_sys", internal=True),
    "ProfilingConfig.rpc_timeout_s": Keys("trainer.profiler.rpc_timeout_s"),
    "ProfilingConfig.finalize_timeout_s": Keys("trainer.profiler.finalize_timeout_s"),
    "ProfilingConfig.on_rank_failure": Keys("trainer.profiler.on_rank_failure"),
    "ProfilingConfig.source": Keys("", internal=True),
    "ComponentsConfig.actor": Keys("actor_rollout_ref.actor", internal=True),
    "ComponentsConfig.rollout": Keys("actor_rollout_ref.rollout", internal=True),
    "ComponentsConfig.ref": Keys("actor_rollout_ref.ref", internal=True),
    "ComponentsConfig.critic": Keys("critic", internal=True),
    "ComponentsConfig.rm": Keys("reward_model", internal=True),
    "ComponentConfig.ranks": Keys(
        "<role>.profile_ranks", verl_profiler="`<role>.profiler.ranks`",
        global_profiler="`<role>.profiler.ranks` (and `<role>.profiler.enable`)",
        nemo="`NRL_NSYS_WORKER_PATTERNS` or `NRL_TORCH_PROFILE_WORKER_PATTERNS` (every rank of "
             "a matched worker)"),
    "ComponentConfig.all_ranks": Keys(
        "<role>.profile_ranks_all", verl_profiler="`<role>.profiler.all_ranks`",
        global_profiler="`<role>.profiler.all_ranks`"),
    "ComponentConfig.discrete": Keys(
        "<role>.profile_discrete", verl_profiler="`<role>.profiler.discrete`",
        global_profiler="`global_profiler.global_tool_config.nsys.discrete` (nsys, every "
                        "role); `<role>.profiler.tool_config.torch.discrete` (torch)",
        nemo="always false"),
    "ComponentConfig.ranks_key": Keys("", internal=True),
    "ComponentConfig.discrete_key": Keys("", internal=True),
    "NsysConfig.worker_options_key": Keys("", internal=True),
    "NsysConfig.controller_options_key": Keys("", internal=True),
    "NsysConfig.worker_options": Keys(
        "trainer.worker_nsight_options",
        global_profiler="`global_profiler.global_tool_config.nsys.worker_nsight_options`",
        nemo="`NRL_NSYS_EXTRA_OPTIONS` (merged over it)",
        default="`{trace: cuda,nvtx,cublas, cuda-memory-usage: true, cuda-graph-trace: node}` "
                "when `trainer.device` is `cuda` (the default), else `{trace: nvtx,osrt}`"),
    "NsysConfig.worker_flags": Keys("trainer.profiler.nsys.worker_flags"),
    "NsysConfig.controller_options": Keys(
        "trainer.controller_nsight_options",
        global_profiler="`global_profiler.global_tool_config.nsys.controller_nsight_options`"),
    "NsysConfig.controller_flags": Keys("trainer.profiler.nsys.controller_flags"),
    "NsysConfig.trigger": Keys("trainer.profiler.nsys.trigger"),
    "NsysConfig.executable": Keys("trainer.profiler.nsys.executable"),
    "TorchProfilerConfig.record_shapes": Keys(
        "trainer.profiler.torch.record_shapes",
        global_profiler="`shapes` in a torch `contents` list"),
    "TorchProfilerConfig.profile_memory": Keys(
        "trainer.profiler.torch.profile_memory",
        global_profiler="`memory` in a torch `contents` list"),
    "TorchProfilerConfig.with_stack": Keys(
        "trainer.profiler.torch.with_stack", global_profiler="`stack` in a torch `contents` list"),
    "TorchProfilerConfig.cuda": Keys(
        "trainer.profiler.torch.cuda", global_profiler="`cuda` in a torch `contents` list"),
    "RocprofSysConfig.args": Keys("trainer.profiler.rocprof_sys.args"),
    "RocprofSysConfig.env": Keys("trainer.profiler.rocprof_sys.env"),
    "RocprofSysConfig.executable": Keys("trainer.profiler.rocprof_sys.executable"),
}
"""Schema field (``Class.field``) → where users set it."""

SECTIONS: Tuple[Tuple[str, str, str], ...] = (
    ("ProfilingConfig", "Run-wide settings",
     "Which steps, which tool, where the files go. Read from `trainer` (and "
     "`trainer.profiler`, verlprof's own block, in every layout)."),
    ("ComponentConfig", "Per-role rank selection",
     "One block per role. `<role>` is one of: "
     + ", ".join(f"`{s}`" for s in ROLE_SECTIONS.values())
     + " (aliases: `actor_rollout_ref.critic`, `rm`, `actor_rollout_ref.rm`)."),
    ("NsysConfig", "Nsight Systems (`tool: nsys`)",
     "Options are written as YAML mappings and rendered to `nsys profile` arguments. "
     "verlprof always sets `--capture-range`, `--capture-range-end=repeat:N`, "
     "`--output` and `--force-overwrite` itself; a user value for those is dropped with a "
     "warning."),
    ("TorchProfilerConfig", "PyTorch profiler (`tool: torch`)", ""),
    ("RocprofSysConfig", "rocprof-sys (`tool: rocprof_sys`)", ""),
)
"""Dataclasses rendered as sections, in order, with a title and an introduction."""

CONSTANTS: Tuple[str, ...] = ("TOOLS", "ROLES", "TRIGGERS", "DEFAULT_FILENAME_TEMPLATE")
"""Module-level constants of the schema listed under "Values"."""


@dataclass(frozen=True)
class FieldDoc:
    """One dataclass field as written in the source."""

    owner: str
    name: str
    annotation: str
    default: str
    doc: str


def parse_schema(path: str = SCHEMA_PATH) -> Tuple[Dict[str, List[FieldDoc]],
                                                   Dict[str, Tuple[str, str]]]:
    """Fields per dataclass (source order) and the documented module constants."""
    with open(path, encoding="utf-8") as handle:
        tree = ast.parse(handle.read(), filename=path)
    classes: Dict[str, List[FieldDoc]] = {}
    constants: Dict[str, Tuple[str, str]] = {}
    body = tree.body
    for i, node in enumerate(body):
        if isinstance(node, ast.ClassDef):
            classes[node.name] = _fields(node)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            doc = _docstring_after(body, i)
            for target in targets:
                if doc and isinstance(target, ast.Name):
                    constants[target.id] = (_default(node.value), doc)
    return classes, constants


def _fields(cls: ast.ClassDef) -> List[FieldDoc]:
    out = []
    for i, node in enumerate(cls.body):
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        out.append(FieldDoc(cls.name, node.target.id, ast.unparse(node.annotation),
                            _default(node.value), _docstring_after(cls.body, i)))
    return out


def _docstring_after(body: Sequence[ast.stmt], index: int) -> str:
    if index + 1 < len(body):
        nxt = body[index + 1]
        if (isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant)
                and isinstance(nxt.value.value, str)):
            return " ".join(nxt.value.value.split())
    return ""


def _default(value: Optional[ast.expr]) -> str:
    """The default as YAML would show it."""
    if value is None:
        return "required"
    if isinstance(value, ast.Call) and ast.unparse(value.func) == "field":
        for kw in value.keywords:
            if kw.arg == "default_factory":
                factory = ast.unparse(kw.value)
                return {"dict": "{}", "list": "[]", "tuple": "[]"}.get(factory, "see below")
            if kw.arg == "default":
                return _default(kw.value)
        return "required"
    if isinstance(value, ast.Constant):
        literal = value.value
        if literal is None:
            return "null"
        if isinstance(literal, bool):
            return str(literal).lower()
        if isinstance(literal, str):
            return f'"{literal}"'
        return repr(literal)
    if isinstance(value, ast.Tuple) and all(isinstance(e, ast.Constant) for e in value.elts):
        return "[" + ", ".join(str(e.value) for e in value.elts) + "]"
    if isinstance(value, ast.Name) and value.id == "DEFAULT_FILENAME_TEMPLATE":
        return "DEFAULT_FILENAME_TEMPLATE"
    return ast.unparse(value)


_TYPE_WORDS = {
    "int": "int", "float": "number", "bool": "bool", "str": "string",
    "OptionValue": "string, number, bool or null",
}


def yaml_type(annotation: str) -> str:
    """A Python annotation in YAML words: ``Tuple[int, ...]`` → ``list of int``."""
    node = ast.parse(annotation, mode="eval").body
    return _type_words(node)


def _type_words(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return _TYPE_WORDS.get(node.id, node.id)
    if isinstance(node, ast.Constant) and node.value is None:
        return "null"
    if isinstance(node, ast.Subscript):
        outer = ast.unparse(node.value)
        args = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if outer == "Optional":
            return f"{_type_words(args[0])} or null"
        if outer == "Tuple":
            return f"list of {_type_words(args[0])}"
        if outer == "Dict":
            return f"mapping of {_type_words(args[0])} to {_type_words(args[1])}"
    return ast.unparse(node)


def _default_text(f: FieldDoc, keys: Keys, constants: Dict[str, Tuple[str, str]]) -> str:
    if keys.default:
        return keys.default
    value = constants[f.default][0] if f.default in constants else f.default
    return f"`{value}`"


def _md_doc(text: str) -> str:
    """reST literals (````x````) as Markdown code (`` `x` ``)."""
    return text.replace("``", "`")


def render(path: str = SCHEMA_PATH) -> str:
    """The whole reference page as Markdown."""
    classes, constants = parse_schema(path)
    missing = [f"{c}.{f.name}" for c, fields in classes.items() for f in fields
               if f"{c}.{f.name}" not in KEYS]
    if missing:
        raise ValueError("schema fields without an entry in verlprof.config.reference.KEYS: "
                         + ", ".join(missing))
    lines = [
        "# Configuration reference",
        "",
        "<!-- Generated by `python -m verlprof.config.reference` from the docstrings in",
        "     verlprof/config/schema.py. Do not edit by hand: tests/docs fails when it is",
        "     stale. -->",
        "",
        "Every setting verlprof reads, under the key you write in verlprof's primary layout,",
        "with the same setting in verl's layouts and NeMo RL's variables. Which source wins",
        "when several are set: [config_sources.md](config_sources.md). Migrating a verl",
        "config: [migrating_from_verl.md](migrating_from_verl.md).",
        "",
        "`<role>` stands for a role section: "
        + ", ".join(f"`{s}`" for s in ROLE_SECTIONS.values()) + ".",
        "",
    ]
    for cls, title, intro in SECTIONS:
        lines += [f"## {title}", ""]
        if intro:
            lines += [intro, ""]
        for f in classes[cls]:
            keys = KEYS[f"{cls}.{f.name}"]
            if keys.internal:
                continue
            lines += _render_field(f, keys, constants)
    lines += ["## Values", ""]
    for name in CONSTANTS:
        if name in constants:
            value, doc = constants[name]
            lines += [f"- `{name}` = `{value}`: {_md_doc(doc)}"]
    lines += ["", "## Other schema fields", "",
              "Blocks that group the settings above, and fields the loader fills in. Not "
              "user settings; listed so that every field of the schema appears here.", ""]
    for cls, fields in classes.items():
        for f in fields:
            if KEYS[f"{cls}.{f.name}"].internal:
                lines += [f"- `{cls}.{f.name}`: {_md_doc(f.doc)}"]
    lines.append("")
    return "\n".join(lines)


def _render_field(f: FieldDoc, keys: Keys, constants: Dict[str, Tuple[str, str]]) -> List[str]:
    out = [f"### `{keys.seed}`", ""]
    out.append(f"- type: {yaml_type(f.annotation)}; default: {_default_text(f, keys, constants)}")
    if keys.verl_profiler:
        out.append(f"- verl 2025-06/07 layout: {keys.verl_profiler}")
    if keys.global_profiler:
        out.append(f"- verl 2025-08+ layout: {keys.global_profiler}")
    if keys.nemo:
        out.append(f"- NeMo RL: {keys.nemo}")
    out.append(f"- schema field: `{f.owner}.{f.name}`")
    out += ["", _md_doc(f.doc), ""]
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m verlprof.config.reference",
        description="Write docs/config_reference.md from the docstrings in "
                    "verlprof/config/schema.py.")
    parser.add_argument("-o", "--output", default=DEFAULT_OUTPUT, metavar="PATH",
                        help="where to write ('-': stdout; default docs/config_reference.md)")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 with a diff when PATH is out of date")
    args = parser.parse_args(argv)
    text = render()
    if args.output == "-":
        sys.stdout.write(text)
        return 0
    if args.check:
        try:
            with open(args.output, encoding="utf-8") as handle:
                current = handle.read()
        except FileNotFoundError:
            current = ""
        if current == text:
            print(f"{args.output}: up to date")
            return 0
        sys.stdout.writelines(difflib.unified_diff(
            current.splitlines(keepends=True), text.splitlines(keepends=True),
            fromfile=args.output, tofile="generated"))
        print(f"{args.output} is out of date: run python -m verlprof.config.reference",
              file=sys.stderr)
        return 1
    with open(args.output, "w", encoding="utf-8") as handle:
        handle.write(text)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
