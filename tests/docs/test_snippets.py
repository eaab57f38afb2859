"""Every code block of README.md, docker/README.md and docs/*.md runs, or is validated.

What happens to each language is in :mod:`tests.docs.snippets`. The commands that are not run
as written are listed below, each with the reason and what is checked instead. A block with an
unknown (or no) language fails: every block must say what it is.

Commands run in a scratch copy of the repository's layout (``trainer_configs/``, ``docker/``,
the ``Makefile``) whose ``outputs/ppo_demo/profiling`` is a real run of the user guide's quick
start (``tests/docs/fixtures/quickstart_run``: demo, steps 3 and 4, actor rank 0, nsys 2022.4).
"""

from __future__ import annotations

import ast
import glob
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
from typing import Dict, List, Optional

import pytest

from tests.docs import snippets
from tests.docs.snippets import ROOT, Block, Command
from tests.helpers import require_nsys

FIXTURE = os.path.join(ROOT, "tests", "docs", "fixtures", "quickstart_run")
DEMO_OUTPUT = os.path.join("outputs", "ppo_demo", "profiling")

NOT_RUN: Dict[str, str] = {
    "make": "installs a virtual environment, torch and Nsight Systems (minutes, needs root); "
            "checked: the Makefile has the target. CI runs `make test` itself.",
    "nsys-ui": "the Nsight Systems GUI needs a display; checked: every file it would open "
               "exists in the quick-start run.",
    "docker": "no Docker engine on the test machines; checked: `docker build` names "
              "docker/Dockerfile and only its ARGs, and the command a `docker run` line runs "
              "inside the image is run here.",
    "verlprof-smoke": "the image's smoke test; tests/docs/test_docker.py runs docker/smoke.sh "
                      "against the real nsys here.",
    "pytest": "the test suite itself (running it from a test would recurse); checked: the "
              "test paths it names exist.",
    "pip": "installs from PyPI into the test's environment; checked: the extra it names is "
           "declared in setup.cfg.",
    "python -m verlprof.bridges.verl": "starts verl's trainer (models, datasets, GPUs); checked: "
                                       "the same overrides run with --plan, which composes "
                                       "verl's config and plans it.",
    "python -m <not verlprof>": "only verlprof's own modules run here; others (the benchmarks) "
                                "take minutes; checked: the module exists.",
}
"""Programs whose command lines are checked instead of run, and why."""

DEMO_REASON = ("a demo run takes 40-90 s on 2 cores (docs tests stay under 60 s): `verlprof "
               "check` runs with the same config and overrides instead, which loads, "
               "validates and plans them; tests/integration runs the demo itself.")
"""Why `verlprof demo` lines run as `verlprof check`."""

RUNNING_JOB_REASON = ("`verlprof capture` and `verlprof status` talk to a running job; "
                      "checked: the command line parses with verlprof's own parser; "
                      "tests/integration/test_on_demand.py asks a running demo for real.")
"""Why `verlprof capture` / `status` lines are parsed, not run."""

RAY_PYTHON = ("needs a Ray cluster and profiled worker processes (a minute or more here): "
              "compiled, and every import resolved; tests/integration/test_runtime_*.py run the "
              "same API (worker_options, ProfileController, finalize) for real.")
"""Why Python blocks that use Ray are not executed."""

DOCKER_RUN_VALUE_OPTIONS = {"-v", "--volume", "-e", "--env", "--gpus", "-w", "--workdir",
                            "--name", "--cap-add", "--network", "-p", "--publish",
                            "--shm-size", "--user", "-u"}
YAML_BASE = {"trainer": {"nnodes": 1, "n_gpus_per_node": 8}}
"""Topology under every YAML snippet (a snippet's own keys win): 8 ranks per group."""

ALL = snippets.all_blocks()


def _ids(blocks: List[Block]) -> List[str]:
    return [b.where for b in blocks]


def _of(lang: str) -> List[Block]:
    return [b for b in ALL if b.lang == lang]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> str:
    """A directory laid out like the repository root, with the quick start's output."""
    ws = str(tmp_path_factory.mktemp("docs_ws"))
    shutil.copytree(os.path.join(ROOT, "trainer_configs"), os.path.join(ws, "trainer_configs"))
    shutil.copytree(FIXTURE, os.path.join(ws, DEMO_OUTPUT))
    # a copy: `python scripts/config_reference.py` run here rewrites this one, not the repo's
    shutil.copytree(os.path.join(ROOT, "docs"), os.path.join(ws, "docs"))
    # `python -m verlprof...` imports this link (the working directory comes first on
    # sys.path), and the generator's repository root is its scripts/ link's parent: the
    # workspace
    for name in ("docker", "Makefile", "verlprof", "scripts", "setup.cfg", "pyproject.toml",
                 "README.md"):
        os.symlink(os.path.join(ROOT, name), os.path.join(ws, name))
    return ws


def test_every_block_names_a_known_language():
    unknown = [f"{b.where}: {b.lang or '(none)'}" for b in ALL if b.lang not in snippets.LANGUAGES]
    assert not unknown, f"mark each block with one of {snippets.LANGUAGES}: {unknown}"


def test_readme_keeps_the_two_setup_commands():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as handle:
        text = handle.read()
    for line in ("make demo   # installs what the demo needs (venv, torch CPU, nsys), runs the "
                 "demo profiled",
                 "make test   # installs the rest (test tools, verl), runs every test (unit + "
                 "real Ray/nsys/torch)"):
        assert line in text.splitlines()


# -- bash ----------------------------------------------------------------------------------

@pytest.mark.parametrize("block", _of("bash"), ids=_ids(_of("bash")))
def test_bash_block(block: Block, workspace: str):
    if snippets.needs_shell(block.text):
        printed: Optional[str] = _run_in_bash(block, workspace)
    else:
        outputs = [_run_command(command, workspace, block)
                   for command in snippets.commands(block.text)]
        printed = None if None in outputs else "".join(o or "" for o in outputs)
    _check_shown_output(block, printed, workspace)


def _check_shown_output(block: Block, printed: Optional[str], ws: str) -> None:
    """The ``text`` block right after ``block`` is what it printed (``printed``: stderr then
    stdout of each command in turn; None: the block did not run as written)."""
    shown = block.after
    if shown is None or shown.lang != "text" or shown.illustrative:
        return
    assert printed is not None, (
        f"{shown.where}: {block.where} does not run as written here, so the output shown "
        "cannot be compared: mark it <!-- output: illustrative: <why> --> before its fence")
    problem = snippets.output_differs(shown, printed, ws)
    assert problem is None, problem


def test_every_output_block_is_checked_or_marked_illustrative():
    """A ``text`` block is the output of the block before it (compared by the tests above) or
    says why it is not compared."""
    preceded = {b.after.where for b in ALL if b.after is not None and
                b.lang in ("bash", "python")}
    unmarked = [b.where for b in _of("text")
                if b.where not in preceded and not b.illustrative]
    assert not unmarked, (
        "a text block that is not the output of the bash/python block right before it needs "
        f"<!-- output: illustrative: <why> --> before its fence: {unmarked}")
    vague = [b.where for b in ALL if b.marker and not re.fullmatch(
        r"excerpt(: \S.*)?|illustrative: \S.*", b.marker)]
    assert not vague, f"say `excerpt`, `excerpt: <why>` or `illustrative: <why>`: {vague}"
    stray = [b.where for b in ALL if b.marker and b.lang != "text"]
    assert not stray, f"an output marker belongs before a text block: {stray}"


def _bash_env() -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NRL_")}
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    return env


def _run_in_bash(block: Block, ws: str) -> str:
    assert "verlprof demo" not in block.text, (
        f"{block.where}: keep `verlprof demo` out of blocks with shell syntax ({DEMO_REASON})")
    if "nsys " in block.text:
        require_nsys()
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", block.text], cwd=ws,
                          env=_bash_env(), capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, f"{block.where}: exit {proc.returncode}\n{proc.stdout}\n" \
                                 f"{proc.stderr}"
    return proc.stderr + proc.stdout


def _run_command(command: Command, ws: str, block: Block) -> Optional[str]:
    """Run (or check) one command line: what it printed, or None when it did not run as
    written."""
    argv = command.argv
    program = argv[0]
    where = f"{block.where}: {command.text}"
    module = argv[argv.index("-m") + 1] if "-m" in argv[:-1] else None
    if program == "verlprof":
        return _run_verlprof(argv[1:], command, ws, where)
    if program in ("python", "python3") and module == "verlprof.bridges.verl" \
            and "--plan" not in argv:
        _run_program(Command(command.env, [*argv[:3], "--plan", *argv[3:]], command.expect_rc,
                             command.text), ws, where)
    elif program in ("nsys", "hadolint") or (
            program in ("python", "python3") and (module or "verlprof").startswith("verlprof")):
        return _run_program(command, ws, where)
    elif program == "make":
        _check_make(argv[1:], where)
    elif program == "nsys-ui":
        _check_files(argv[1:], ws, where)
    elif program == "docker":
        _check_docker(argv[1:], command, ws, block, where)  # not as written: in the image
    elif program == "verlprof-smoke":
        assert os.path.isfile(os.path.join(ROOT, "docker", "smoke.sh")), where
    elif program == "pip":
        _check_pip(argv[1:], where)
    elif program == "pytest":
        paths = [a.split("::")[0] for a in argv[1:] if not a.startswith("-")]
        for path in paths:
            assert os.path.exists(os.path.join(ROOT, path)), f"{where}: no {path}"
    elif program in ("python", "python3") and module is not None:
        found = subprocess.run([sys.executable, "-c", "import importlib.util, sys; sys.exit("
                                f"importlib.util.find_spec({module!r}) is None)"], cwd=ROOT)
        assert found.returncode == 0, f"{where}: no module {module}"
    else:
        pytest.fail(f"{where}: no rule for {program!r}; run it or add it to NOT_RUN with the "
                    "reason")
    return None


def _run_verlprof(args: List[str], command: Command, ws: str, where: str) -> Optional[str]:
    """What the command printed (stderr, then stdout unless redirected); None for a demo,
    which runs as `verlprof check` here."""
    as_written = not (args and args[0] == "demo")
    if args and args[0] in ("capture", "status"):  # RUNNING_JOB_REASON
        from verlprof.cli import _parser

        _parser().parse_args(args)
        return None
    if args and args[0] == "demo":
        # DEMO_REASON: same config and overrides, validated and planned
        rest = args[1:]
        args = ["check", *rest] if "--config" in rest else \
            ["check", "--config", os.path.join("trainer_configs", "ppo_trainer.yaml"), *rest]
    if args and args[0] == "report":
        require_nsys()  # the quick-start run is nsys reports: reading them runs nsys export
    redirect = None
    if len(args) >= 2 and args[-2] == ">":
        redirect, args = args[-1], args[:-2]
    rc, out, err = snippets.run_verlprof(args, command.env, ws)
    assert rc == command.expect_rc, f"{where}\nexit {rc}, expected {command.expect_rc}\n" \
                                    f"stdout:\n{out}\nstderr:\n{err}"
    if redirect:
        with open(os.path.join(ws, redirect), "w", encoding="utf-8") as handle:
            handle.write(out)
    return (err + ("" if redirect else out)) if as_written else None


def _check_make(targets: List[str], where: str) -> None:
    with open(os.path.join(ROOT, "Makefile"), encoding="utf-8") as handle:
        defined = set(re.findall(r"^([A-Za-z0-9_.-]+):", handle.read(), re.M))
    missing = [t for t in targets if t not in defined]
    assert not missing, f"{where}: ({NOT_RUN['make']}) no Makefile target {missing}"


def _check_pip(args: List[str], where: str) -> None:
    assert args[:1] == ["install"], f"{where}: only `pip install` is documented"
    with open(os.path.join(ROOT, "setup.cfg"), encoding="utf-8") as handle:
        setup = handle.read()
    for spec in args[1:]:
        extra = re.fullmatch(r"verlprof\[(\w+)\]", spec)
        assert extra, f"{where}: {spec} is not verlprof or one of its extras"
        assert re.search(rf"^{extra.group(1)} =", setup, re.M), \
            f"{where}: setup.cfg declares no extra {extra.group(1)!r}"


def _check_files(args: List[str], ws: str, where: str) -> None:
    files = [a for a in args if not a.startswith("-")]
    assert files, where
    for pattern in files:
        assert glob.glob(os.path.join(ws, pattern)), f"{where}: {pattern} matches no file"


def _dockerfile_args() -> List[str]:
    with open(os.path.join(ROOT, "docker", "Dockerfile"), encoding="utf-8") as handle:
        return re.findall(r"^ARG\s+([A-Za-z_][A-Za-z0-9_]*)", handle.read(), re.M)


def _check_docker(args: List[str], command: Command, ws: str, block: Block, where: str) -> None:
    assert args, where
    if args[0] == "build":
        assert "-f" in args, f"{where}: name the Dockerfile with -f"
        dockerfile = args[args.index("-f") + 1]
        assert os.path.isfile(os.path.join(ROOT, dockerfile)), f"{where}: no {dockerfile}"
        build_args = [args[i + 1].split("=")[0] for i, a in enumerate(args) if a == "--build-arg"]
        unknown = set(build_args) - set(_dockerfile_args())
        assert not unknown, f"{where}: {sorted(unknown)} are not ARGs of {dockerfile}"
        assert args[-1] == ".", f"{where}: the build context is the repository root"
        return
    assert args[0] == "run", f"{where}: only docker build and docker run are documented"
    i = 1
    while i < len(args) and args[i].startswith("-"):
        i += 2 if args[i] in DOCKER_RUN_VALUE_OPTIONS else 1
    assert i < len(args) and args[i].startswith("verlprof:"), f"{where}: image not found"
    inner = args[i + 1:]
    assert inner, f"{where}: say what the container runs"
    _run_command(Command(command.env, inner, command.expect_rc, " ".join(inner)), ws, block)


def _run_program(command: Command, ws: str, where: str) -> str:
    program = command.argv[0]
    if program == "nsys":
        require_nsys()
    if program == "hadolint":
        from tests.docs.test_docker import require_hadolint

        command = Command(command.env, [require_hadolint(), *command.argv[1:]],
                          command.expect_rc, command.text)
    argv = [sys.executable, *command.argv[1:]] if program.startswith("python") else command.argv
    env = dict(_bash_env(), **command.env)
    # through bash, for the globs the docs use (nsys stats outputs/.../*.nsys-rep)
    line = " ".join(_quote_keeping_globs(a) for a in argv)
    proc = subprocess.run(["bash", "-c", line], cwd=ws, env=env, capture_output=True,
                          text=True, timeout=180)
    assert proc.returncode == command.expect_rc, (
        f"{where}\nexit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc.stderr + proc.stdout


def _quote_keeping_globs(arg: str) -> str:
    return arg if re.fullmatch(r"[\w./*=:+-]+", arg) else "'" + arg.replace("'", "'\\''") + "'"


# -- yaml ----------------------------------------------------------------------------------

@pytest.mark.parametrize("block", _of("yaml"), ids=_ids(_of("yaml")))
def test_yaml_block(block: Block):
    from omegaconf import OmegaConf

    from verlprof.config import ConfigError, config_from_dict
    from verlprof.plan import build_plan

    first = block.text.splitlines()[0]
    expect_error = first[len("# error:"):].strip() if first.startswith("# error:") else None
    cfg = OmegaConf.merge(OmegaConf.create(YAML_BASE), OmegaConf.create(block.text))
    try:
        loaded = config_from_dict(cfg, env={})
        plan = build_plan(loaded.profiling, loaded.topology)
    except ConfigError as err:
        if expect_error is not None and expect_error in str(err):
            return
        pytest.fail(f"{block.where}: {err}")
    assert expect_error is None, f"{block.where}: expected an error containing {expect_error!r}"
    profiling = loaded.profiling
    selects = any(profiling.components.get(r).selects_any
                  for r in ("actor", "rollout", "ref", "critic", "rm"))
    if profiling.active and selects:
        assert plan.enabled and plan.reports, f"{block.where}: plans no report"


# -- python --------------------------------------------------------------------------------

PYTHON_FILES = sorted({b.path for b in _of("python")})


def _uses_ray(code: str) -> bool:
    return bool(re.search(r"^\s*import ray\b|\.remote\(", code, re.M))


@pytest.mark.parametrize("path", PYTHON_FILES)
def test_python_blocks(path: str, workspace: str):
    namespace: dict = {"__name__": "__docs__"}
    for block in [b for b in snippets.blocks(path) if b.lang == "python"]:
        if _uses_ray(block.text):
            _check_statically(block)  # RAY_PYTHON
            _check_shown_output(block, None, workspace)
            continue
        printed = snippets.run_python(block.text, namespace, workspace, block.where)
        _check_shown_output(block, printed, workspace)


def _check_statically(block: Block) -> None:
    tree = ast.parse(block.text, filename=block.where)
    compile(tree, block.where, "exec")
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            module = importlib.import_module(node.module)
            for alias in node.names:
                assert hasattr(module, alias.name), \
                    f"{block.where}: {node.module} has no {alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                importlib.import_module(alias.name)


# -- json, dockerfile ----------------------------------------------------------------------

@pytest.mark.parametrize("block", _of("json"), ids=_ids(_of("json")))
def test_json_block(block: Block):
    import dataclasses

    import dacite

    from verlprof.manifest import ReportEntry

    data = json.loads(block.text)
    if isinstance(data, dict) and {"steps", "group", "status"} <= set(data):
        dacite.from_dict(ReportEntry, data, config=dacite.Config(cast=[tuple], strict=True))
        fields = {f.name for f in dataclasses.fields(ReportEntry)}
        assert set(data) == fields, f"{block.where}: a manifest entry has {sorted(fields)}"


@pytest.mark.parametrize("block", _of("dockerfile"), ids=_ids(_of("dockerfile")))
def test_dockerfile_block(block: Block, tmp_path):
    from tests.docs.test_docker import require_hadolint

    path = tmp_path / "Dockerfile"
    path.write_text(block.text)
    proc = subprocess.run([require_hadolint(), "--no-color", str(path)], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, f"{block.where}:\n{proc.stdout}{proc.stderr}"


# -- links ---------------------------------------------------------------------------------

@pytest.mark.parametrize("path", snippets.doc_files())
def test_links_resolve(path: str):
    problems = []
    for line, target in snippets.links(path):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto: not fetched
        file_part, _, anchor = target.partition("#")
        resolved = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) \
            if file_part else path
        if not os.path.exists(os.path.join(ROOT, resolved)):
            problems.append(f"{path}:{line}: {target}: no {resolved}")
        elif anchor and resolved.endswith(".md") and anchor not in snippets.anchors(resolved):
            problems.append(f"{path}:{line}: {target}: no heading #{anchor} in {resolved}")
    assert not problems, "\n".join(problems)
