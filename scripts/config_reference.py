"""Generate ``docs/config_reference.md`` from the schema: its fields, defaults and docstrings.

Types, defaults and values are read from the imported schema (:mod:`verlprof.config.schema`);
the docstrings under each field, which Python does not keep, are read from its source with
:mod:`ast`, in source order. Each setting is listed under the key a user writes in the seed
layout, which comes from the layout readers' own spelling tables (``trainer.profiler`` keys
are the schema's names, see :mod:`.profiler_block`; the ``trainer`` and role keys are in
:mod:`.layouts`), so a schema field that no reader maps fails here. :data:`NOTES` adds how
verl's layouts and NeMo RL's variables spell the same setting.

::

    python scripts/config_reference.py            # rewrite docs/config_reference.md
    python scripts/config_reference.py --check    # exit 1 when the file is out of date
    python scripts/config_reference.py -o -       # print to stdout

Documentation machinery, not part of the package: it reads the installed schema's source.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import difflib
import os
import sys
import typing
from dataclasses import dataclass
from typing import Any, Dict, List, Literal, Optional, Sequence, Tuple

from verlprof.config import layouts, profiler_block, schema

SCHEMA_PATH = os.path.abspath(schema.__file__)
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUTPUT = os.path.join(REPO_ROOT, "docs", "config_reference.md")

ROLE_SECTIONS: Dict[str, str] = {role: keys[0] for role, keys in layouts.ROLE_SECTIONS.items()}
"""Main YAML section of each role (aliases are listed in docs/config_sources.md)."""

ROLE_ALIASES: Tuple[str, ...] = tuple(alias for sections in layouts.ROLE_SECTIONS.values()
                                     for alias in sections[1:])
"""The other sections a role may be set in (``rm`` for ``reward_model``...)."""


@dataclass(frozen=True)
class Notes:
    """How other layouts set one schema field, and the default users really get (Markdown)."""

    verl_profiler: str = ""
    """verl 2025-06/07 layout, when it differs from the seed key."""
    global_profiler: str = ""
    """verl 2025-08+ ``global_profiler`` layout, when it differs from the seed key."""
    nemo: str = ""
    """NeMo RL environment variable(s) that set it."""
    default: str = ""
    """The effective default when the schema's default is not what users get."""


@dataclass(frozen=True)
class Keys:
    """Where one schema field is set, in each input layout (empty: not settable there)."""

    seed: str
    """Key in verlprof's primary (seed) layout; ``<role>`` stands for a role section."""
    notes: Notes = Notes()
    """The other layouts' spellings."""
    internal: bool = False
    """A block of other fields, or set by the loader: not a user setting."""


NOTES: Dict[str, Notes] = {
    "ProfilingConfig.steps": Notes(
        global_profiler="`global_profiler.steps`",
        nemo="`NRL_NSYS_PROFILE_STEP_RANGE` or `NRL_TORCH_PROFILE_STEP_RANGE`"),
    "ProfilingConfig.continuous_steps": Notes(
        global_profiler="`global_profiler.profile_continuous_steps`",
        nemo="always true: the step range is one window"),
    "ProfilingConfig.tool": Notes(
        global_profiler="`global_profiler.tool`",
        nemo="`nsys` when `NRL_NSYS_*` is set, `torch` when `NRL_TORCH_PROFILE_*` is"),
    "ProfilingConfig.enabled": Notes(global_profiler="`global_profiler.tool: null` turns it off"),
    "ProfilingConfig.output_dir": Notes(
        global_profiler="`global_profiler.save_path` (`trainer.profiler.output_dir` wins)",
        nemo="`NRL_TORCH_PROFILE_DIR`",
        default="`<trainer.default_local_dir or outputs>/<trainer.experiment_name>/profiling`, "
                "made absolute"),
    "ComponentConfig.ranks": Notes(
        verl_profiler="`<role>.profiler.ranks`",
        global_profiler="`<role>.profiler.ranks` (and `<role>.profiler.enable`)",
        nemo="`NRL_NSYS_WORKER_PATTERNS` or `NRL_TORCH_PROFILE_WORKER_PATTERNS` (every rank of "
             "a matched worker)"),
    "ComponentConfig.all_ranks": Notes(
        verl_profiler="`<role>.profiler.all_ranks`",
        global_profiler="`<role>.profiler.all_ranks`"),
    "ComponentConfig.discrete": Notes(
        verl_profiler="`<role>.profiler.discrete`",
        global_profiler="`global_profiler.global_tool_config.nsys.discrete` (nsys, every "
                        "role); `<role>.profiler.tool_config.torch.discrete` (torch)",
        nemo="always false"),
    "NsysConfig.worker_options": Notes(
        global_profiler="`global_profiler.global_tool_config.nsys.worker_nsight_options`",
        nemo="`NRL_NSYS_EXTRA_OPTIONS` (merged over it)",
        default="`{trace: cuda,nvtx,cublas, cuda-memory-usage: true, cuda-graph-trace: node}` "
                "when `trainer.device` is `cuda` (the default), else `{trace: nvtx,osrt}`"),
    "NsysConfig.controller_options": Notes(
        global_profiler="`global_profiler.global_tool_config.nsys.controller_nsight_options`"),
    "TorchProfilerConfig.record_shapes": Notes(
        global_profiler="`shapes` in a torch `contents` list"),
    "TorchProfilerConfig.profile_memory": Notes(
        global_profiler="`memory` in a torch `contents` list"),
    "TorchProfilerConfig.with_stack": Notes(
        global_profiler="`stack` in a torch `contents` list"),
    "TorchProfilerConfig.cuda": Notes(global_profiler="`cuda` in a torch `contents` list"),
    "FinishHookConfig.cmd": Notes(global_profiler="`global_profiler.finish_hook_cmd`"),
    "FinishHookConfig.all_ranks": Notes(global_profiler="`global_profiler.finish_hook_all_ranks`"),
    "FinishHookConfig.ranks": Notes(global_profiler="`global_profiler.finish_hook_ranks`"),
}
"""Schema field (``Class.field``) → how verl's layouts and NeMo RL spell it (only fields that
have another spelling or a default that depends on the run)."""

SECTIONS: Tuple[Tuple[str, str, str], ...] = (
    ("ProfilingConfig", "Run-wide settings",
     "Which steps, which tool, where the files go. Read from `trainer` (and "
     "`trainer.profiler`, verlprof's own block, in every layout)."),
    ("ComponentConfig", "Per-role rank selection",
     "One block per role. `<role>` is one of: "
     + ", ".join(f"`{s}`" for s in ROLE_SECTIONS.values())
     + " (aliases: " + ", ".join(f"`{a}`" for a in ROLE_ALIASES) + ")."),
    ("NsysConfig", "Nsight Systems (`tool: nsys`)",
     "Options are written as YAML mappings and rendered to `nsys profile` arguments. "
     "verlprof always sets `--capture-range`, `--capture-range-end=repeat:N`, "
     "`--output` and `--force-overwrite` itself; a user value for those is dropped with a "
     "warning."),
    ("TorchProfilerConfig", "PyTorch profiler (`tool: torch`)", ""),
    ("RocprofSysConfig", "rocprof-sys (`tool: rocprof_sys`)", ""),
    ("FinishHookConfig", "Finish hook",
     "Runs once the reports are gathered; verl 0.9.1's `global_profiler.finish_hook_*` keys set "
     "the same fields."),
    ("OnDemandConfig", "Capture on demand (`trainer.profiler.on_demand`)",
     "`verlprof capture <output_dir>` asks a running job for windows; these keys switch it on "
     "and cap what a request may ask (docs/user_guide.md, \"Profile a running job\")."),
)
"""Dataclasses rendered as sections, in order, with a title and an introduction."""

CONSTANTS: Tuple[str, ...] = ("TOOLS", "ROLES", "TRIGGERS", "DEFAULT_FILENAME_TEMPLATE")
"""Module-level constants of the schema listed under "Values"."""


@dataclass(frozen=True)
class FieldDoc:
    """One dataclass field: its annotation as written, its default as YAML, its docstring."""

    owner: str
    name: str
    annotation: str
    default: str
    doc: str


def parse_schema(path: str = SCHEMA_PATH) -> Tuple[Dict[str, List[FieldDoc]],
                                                   Dict[str, Tuple[str, str]]]:
    """Fields per dataclass and the documented module constants, in source order; values come
    from the imported schema, docstrings from the source at ``path``."""
    with open(path, encoding="utf-8") as handle:
        tree = ast.parse(handle.read(), filename=path)
    classes: Dict[str, List[FieldDoc]] = {}
    constants: Dict[str, Tuple[str, str]] = {}
    body = tree.body
    for i, node in enumerate(body):
        if isinstance(node, ast.ClassDef):
            cls = getattr(schema, node.name)
            if dataclasses.is_dataclass(cls):
                docs = _field_docs(node)
                classes[node.name] = [
                    FieldDoc(node.name, f.name, str(f.type), _default(f), docs.get(f.name, ""))
                    for f in dataclasses.fields(cls)]
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            doc = _docstring_after(body, i)
            for target in targets:
                if doc and isinstance(target, ast.Name):
                    constants[target.id] = (yaml_value(getattr(schema, target.id)), doc)
    return classes, constants


def _field_docs(cls: ast.ClassDef) -> Dict[str, str]:
    return {node.target.id: _docstring_after(cls.body, i) for i, node in enumerate(cls.body)
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)}


def _docstring_after(body: Sequence[ast.stmt], index: int) -> str:
    if index + 1 < len(body):
        nxt = body[index + 1]
        if (isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant)
                and isinstance(nxt.value.value, str)):
            return " ".join(nxt.value.value.split())
    return ""


def _default(spec: dataclasses.Field[Any]) -> str:
    if spec.default is not dataclasses.MISSING:
        return yaml_value(spec.default)
    if spec.default_factory is not dataclasses.MISSING:
        return yaml_value(spec.default_factory())
    return "required"


def yaml_value(value: Any) -> str:
    """A default as YAML shows it: ``null``, ``true``, ``"nsys"``, ``[a, b]``, ``{}``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(str(item) for item in value) + "]"
    if isinstance(value, dict) and not value:
        return "{}"
    if dataclasses.is_dataclass(value):
        return "see below"
    return repr(value)


def keys() -> Dict[str, Keys]:
    """Every schema field (``Class.field``) → where users set it, from the readers' tables.

    Raises ValueError for a user setting that no reader maps (it would reach nobody) and for a
    :data:`NOTES` entry that is not a user setting.
    """
    trainer = {path: f"trainer.{key}" for key, path in layouts.TRAINER_FIELDS.items() if path}
    block = profiler_block.field_keys()
    role = {name: f"<role>.{key}" for key, name in layouts.SEED_ROLE_FIELDS.items()}
    out: Dict[str, Keys] = {}
    for cls, path in _class_paths().items():
        hints = typing.get_type_hints(cls)
        for spec in dataclasses.fields(cls):
            name = f"{cls.__name__}.{spec.name}"
            if schema.set_by_loader(spec) or dataclasses.is_dataclass(hints[spec.name]):
                out[name] = Keys("", internal=True)
            elif cls is schema.ComponentConfig:
                out[name] = Keys(role.get(spec.name, ""), NOTES.get(name, Notes()))
            else:
                full = f"{path}.{spec.name}" if path else spec.name
                out[name] = Keys(trainer.get(full) or block.get(full, ""),
                                 NOTES.get(name, Notes()))
    unmapped = [name for name, k in out.items() if not k.internal and not k.seed]
    if unmapped:
        raise ValueError("schema fields that no layout reader maps: " + ", ".join(unmapped))
    stale = [name for name in NOTES if name not in out or out[name].internal]
    if stale:
        raise ValueError("NOTES entries that are not user settings: " + ", ".join(stale))
    return out


def _class_paths() -> Dict[type, str]:
    """Each schema dataclass → its path from ``ProfilingConfig`` (``nsys``; ``<role>`` for the
    per-role block), found by walking the fields' types."""
    paths: Dict[type, str] = {schema.ProfilingConfig: ""}
    todo: List[type] = [schema.ProfilingConfig]
    while todo:
        cls = todo.pop(0)
        for name, sub in typing.get_type_hints(cls).items():
            if isinstance(sub, type) and dataclasses.is_dataclass(sub) and sub not in paths:
                paths[sub] = "<role>" if cls is schema.ComponentsConfig else name
                todo.append(sub)
    return paths


_TYPE_WORDS = {
    "int": "int", "float": "number", "bool": "bool", "str": "string",
    "OptionValue": "string, number, bool or null",
    "MaxBytes": "int, size text (20GiB), auto or null",
}


def yaml_type(annotation: str) -> str:
    """A Python annotation in YAML words: ``Tuple[int, ...]`` → ``list of int``."""
    return _type_words(ast.parse(annotation, mode="eval").body)


def _type_words(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        if _is_text_choice(getattr(schema, node.id, None)):
            return "string"  # a closed choice (Tool, OnRankFailure...): its values are listed
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


def _is_text_choice(value: Any) -> bool:
    """True for a ``Literal`` of strings."""
    return (typing.get_origin(value) is Literal
            and all(isinstance(arg, str) for arg in typing.get_args(value)))


def _md_doc(text: str) -> str:
    """reST literals (````x````) as Markdown code (`` `x` ``)."""
    return text.replace("``", "`")


def render(path: str = SCHEMA_PATH) -> str:
    """The whole reference page as Markdown."""
    classes, constants = parse_schema(path)
    where = keys()
    lines = [
        "# Configuration reference",
        "",
        "<!-- Generated by `python scripts/config_reference.py` from the docstrings in",
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
            if not where[f"{cls}.{f.name}"].internal:
                lines += _render_field(f, where[f"{cls}.{f.name}"])
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
            if where[f"{cls}.{f.name}"].internal:
                lines += [f"- `{cls}.{f.name}`: {_md_doc(f.doc)}"]
    lines.append("")
    return "\n".join(lines)


def _render_field(f: FieldDoc, keys: Keys) -> List[str]:
    notes = keys.notes
    out = [f"### `{keys.seed}`", "",
           f"- type: {yaml_type(f.annotation)}; default: {notes.default or f'`{f.default}`'}"]
    if notes.verl_profiler:
        out.append(f"- verl 2025-06/07 layout: {notes.verl_profiler}")
    if notes.global_profiler:
        out.append(f"- verl 2025-08+ layout: {notes.global_profiler}")
    if notes.nemo:
        out.append(f"- NeMo RL: {notes.nemo}")
    out.append(f"- schema field: `{f.owner}.{f.name}`")
    out += ["", _md_doc(f.doc), ""]
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python scripts/config_reference.py",
        description="Write docs/config_reference.md from the config schema, "
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
        print(f"{args.output} is out of date: run python scripts/config_reference.py",
              file=sys.stderr)
        return 1
    with open(args.output, "w", encoding="utf-8") as handle:
        handle.write(text)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
