"""The finish hook: a command run once after every report is gathered (verl's
``global_profiler.finish_hook_cmd``, verlprof's ``trainer.profiler.finish_hook``).

The controller's :meth:`~verlprof.runtime.controller.ProfileController.finalize` runs it after
``manifest.json`` is written, so the command sees every report and the manifest listing them;
then the manifest is written again with each run's exit status and output tail. The command is
``/bin/sh -c CMD`` (verl defines the key as a shell command), in its own session so that a
timeout kills everything it started. By default it runs once on the controller's host; with
target ranks, once on each target's node (a Ray task pinned there; directly when that is this
node). A hook that fails, times out or cannot start loses no report: it is one line on the
console and in the manifest's warnings.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from typing import Callable, Dict, List, Mapping, Optional, Tuple

from verlprof import paths
from verlprof.manifest import HookRun, Manifest
from verlprof.plan_model import FinishHookPlan, ProfilePlan
from verlprof.records import ProcessIdentity, Target
from verlprof.runtime.teardown import task_on_node
from verlprof.safe_text import one_line, visible
from verlprof.worker.identity import node_id as this_node_id

logger = logging.getLogger("verlprof")

SHELL: Tuple[str, ...] = ("/bin/sh", "-c")
"""How the command runs: verl defines ``finish_hook_cmd`` as a shell command."""

OUTPUT_TAIL_CHARS = 4000
"""How much of the hook's output the manifest keeps (its end: where errors are)."""


def hook_env(output_dir: str, tool: str, target: Optional[Target] = None) -> Dict[str, str]:
    """The variables the hook gets on top of the environment: verlprof's and verl's names for
    the output directory (verl's hook reads ``VERL_PROFILE_SAVE_PATH``)."""
    env = {"VERLPROF_OUTPUT_DIR": output_dir, "VERL_PROFILE_SAVE_PATH": output_dir,
           "VERLPROF_MANIFEST": os.path.join(output_dir, paths.MANIFEST_NAME),
           "VERL_PROFILE_TOOL": tool}
    if target is not None:
        env.update(VERLPROF_GROUP=target[0], VERL_PROFILE_RANK=str(target[1]))
    return env


def run_command(cmd: str, extra_env: Mapping[str, str], timeout_s: float, where: str
                ) -> HookRun:
    """Run ``cmd`` here, with ``extra_env`` added; never raises."""
    host = socket.gethostname()
    started = time.monotonic()
    try:
        proc = subprocess.Popen(list(SHELL) + [cmd], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env={**os.environ, **extra_env}, start_new_session=True)
    except OSError as err:
        return HookRun(cmd=cmd, where=where, host=host,
                       error=f"could not start {SHELL[0]}: {err.strerror or err}")
    try:
        output, _ = proc.communicate(timeout=timeout_s)
        error = None if proc.returncode == 0 else f"exited with status {proc.returncode}"
    except subprocess.TimeoutExpired:
        _kill_session(proc)
        output, _ = proc.communicate()
        error = f"timed out after {timeout_s:g}s and was killed"
    text = output.decode("utf-8", errors="replace")[-OUTPUT_TAIL_CHARS:]
    status = proc.returncode if error is None or error.startswith("exited") else None
    return HookRun(cmd=cmd, where=where, host=host, exit_status=status, output_tail=text,
                   duration_s=round(time.monotonic() - started, 3), error=error)


def _kill_session(proc: subprocess.Popen) -> None:
    """The shell and everything it started (its own session, so its own process group)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()


def run_finish_hook(hook: FinishHookPlan, output_dir: str, tool: str,
                    identities: Mapping[Target, ProcessIdentity]) -> List[HookRun]:
    """Run ``hook`` where the plan says: once here, or once on each target's node."""
    if not hook.targets:
        return [run_command(hook.cmd, hook_env(output_dir, tool), hook.timeout_s, "controller")]
    runs: Dict[Target, HookRun] = {}
    remote = {}
    here = this_node_id()
    for target in hook.targets:
        where = f"{target[0]} rank {target[1]}"
        identity = identities.get(target)
        env = hook_env(output_dir, tool, target)
        if identity is None:
            runs[target] = HookRun(cmd=hook.cmd, where=where,
                                   error="its process never registered: not run")
        elif not identity.node_id or identity.node_id == here:
            runs[target] = run_command(hook.cmd, env, hook.timeout_s, where)
        else:
            task = task_on_node(run_command, identity.node_id)
            remote[target] = task.remote(hook.cmd, env, hook.timeout_s, where)
    if remote:
        runs.update(_gather(remote, hook))
    return [runs[t] for t in hook.targets]


def _gather(refs: Dict[Target, object], hook: FinishHookPlan) -> Dict[Target, HookRun]:
    import ray

    out: Dict[Target, HookRun] = {}
    ready, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=hook.timeout_s + 30)
    for target, ref in refs.items():
        where = f"{target[0]} rank {target[1]}"
        if ref not in ready:
            out[target] = HookRun(cmd=hook.cmd, where=where, error="its node did not answer")
            continue
        try:
            out[target] = ray.get(ref)
        except Exception as err:  # the task itself failed on that node (Ray error types vary)
            out[target] = HookRun(cmd=hook.cmd, where=where, error=one_line(err, 300))
    return out


def problems(hook: FinishHookPlan, runs: List[HookRun]) -> List[str]:
    """One line per failed run, naming the key: for the console and the manifest's warnings."""
    return [f"{hook.key}: the finish hook {run.error} on {run.where}"
            f"{f' ({run.host})' if run.host else ''}; every report is kept (its output tail is "
            "in manifest.json, finish_hook)" for run in runs if run.error is not None]


def report(lines: List[str], echo: bool = True) -> None:
    """Say each problem in the log and, with ``echo``, on the console (stderr)."""
    for line in lines:
        logger.error("verlprof: %s", line)
        if echo:  # the line may quote the command's output: shown visibly, never as codes
            print(f"verlprof: {visible(line)}", file=sys.stderr, flush=True)


def into_manifest(hook: FinishHookPlan, manifest: Manifest, plan: ProfilePlan,
                  identity: Dict[Target, ProcessIdentity], echo: bool,
                  write: Callable[[Manifest], Manifest]) -> Manifest:
    """Run the hook once every report is gathered (it sees them and the manifest listing them),
    then write the manifest again with its runs and, in one line each, its failures."""
    runs = run_finish_hook(hook, plan.output_dir, plan.tool, identity)
    found = problems(hook, runs)
    report(found, echo)
    return write(dataclasses.replace(manifest, finish_hook=tuple(runs),
                                     warnings=tuple(dict.fromkeys(manifest.warnings +
                                                                  tuple(found)))))
