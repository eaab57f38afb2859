"""The seams verlprof uses in verl's rollout engines, checked in the code of the installed verl.

vLLM and SGLang do not install on a CPU machine, so verl's modules for them cannot be imported
here; their source can be read. verlprof relies on three things of each engine's replica and
server classes (docs/verl.md, "Rollout replicas and served models"):

* the replica class launches its servers with ``self.server_class.options(...)`` in
  ``launch_servers`` (verlprof swaps ``server_class`` for its launcher while that runs);
* ``server_class`` is ``ray.remote(<server class>)``;
* the server class has a plain ``async def generate`` (no decorator, so no closure), which a
  configured server reroutes into its windows.

TRT-LLM's replica names its server class directly (a global of its module, not
``server_class``): verlprof replaces that global by a launching class that defers to verl's
outside a bridged launch (``tests/integration/test_verl_fit_cpu.py`` launches verl's real
TRT-LLM replicas; TRT-LLM's module imports on CPU, its server needs a GPU).

Which processes generate (docs/verl.md's process map): vLLM's server always runs its engine
with ``distributed_executor_backend: mp`` (engine processes it spawns, also in hybrid mode,
where the training processes only hand weights over), checked here too.
"""

from __future__ import annotations

import ast
import os
from typing import Dict, Optional

import pytest

from tests.helpers import require_verl

require_verl()

import verl  # noqa: E402

ROLLOUT = os.path.join(os.path.dirname(verl.__file__), "workers", "rollout")
ENGINES = {
    "vllm": ("vllm_rollout/vllm_async_server.py", "vLLMReplica", "vLLMHttpServer"),
    "sglang": ("sglang_rollout/async_sglang_server.py", "SGLangReplica", "SGLangHttpServer"),
}


def _classes(relpath: str) -> Dict[str, ast.ClassDef]:
    with open(os.path.join(ROLLOUT, relpath)) as handle:
        tree = ast.parse(handle.read())
    return {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}


def _method(cls: ast.ClassDef, name: str) -> Optional[ast.AST]:
    return next((n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                 and n.name == name), None)


def _calls_server_class_options(function: ast.AST) -> bool:
    return any(isinstance(n, ast.Attribute) and n.attr == "options"
               and isinstance(n.value, ast.Attribute) and n.value.attr == "server_class"
               for n in ast.walk(function))


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_replicas_launch_their_servers_through_server_class(engine):
    relpath, replica_name, server_name = ENGINES[engine]
    classes = _classes(relpath)
    replica = classes[replica_name]
    assert any(isinstance(b, ast.Name) and b.id == "RolloutReplica" for b in replica.bases)
    launch = _method(replica, "launch_servers")
    assert isinstance(launch, ast.AsyncFunctionDef) and _calls_server_class_options(launch)
    assigned = [n for n in ast.walk(replica) if isinstance(n, ast.Assign)
                and any(isinstance(t, ast.Attribute) and t.attr == "server_class"
                        for t in n.targets)]
    assert [ast.unparse(a.value) for a in assigned] == [f"ray.remote({server_name})"]


SERVERS = {**ENGINES, "trtllm": ("trtllm_rollout/trtllm_async_server.py", "TRTLLMReplica",
                                  "TRTLLMHttpServer")}


@pytest.mark.parametrize("engine", sorted(SERVERS))
def test_servers_generate_is_a_plain_coroutine_function(engine):
    relpath, _, server_name = SERVERS[engine]
    server = _classes(relpath)[server_name]
    for name in ("generate", "start_profile", "stop_profile"):
        method = _method(server, name)
        assert isinstance(method, ast.AsyncFunctionDef), name
    generate = _method(server, "generate")
    assert isinstance(generate, ast.AsyncFunctionDef) and not generate.decorator_list


def test_the_registry_hands_out_every_replica_class():
    """verlprof wraps the classes ``RolloutReplicaRegistry.get`` returns: verl's own lookup
    goes through it."""
    with open(os.path.join(ROLLOUT, "replica.py")) as handle:
        tree = ast.parse(handle.read())
    lookup = next(n for n in tree.body if isinstance(n, ast.FunctionDef)
                  and n.name == "get_rollout_replica_class")
    assert "RolloutReplicaRegistry.get(rollout)" in ast.unparse(lookup)


def test_trtllm_replicas_name_their_server_class_directly():
    classes = _classes("trtllm_rollout/trtllm_async_server.py")
    launch = _method(classes["TRTLLMReplica"], "launch_servers")
    assert launch is not None and not _calls_server_class_options(launch)
    assert "TRTLLMHttpServer.options(" in ast.unparse(launch)
    server = classes["TRTLLMHttpServer"]
    assert [ast.unparse(d) for d in server.decorator_list] == ["ray.remote"]


def test_vllm_servers_spawn_their_engine_processes_in_every_mode():
    """The server's engine arguments: the multiprocessing executor, whatever the rollout mode
    (the training processes of a hybrid replica hold no vLLM worker)."""
    server = _classes(ENGINES["vllm"][0])["vLLMHttpServer"]
    pairs = [(ast.unparse(k), ast.unparse(v)) for n in ast.walk(server)
             if isinstance(n, ast.Dict) for k, v in zip(n.keys, n.values) if k is not None]
    assert ("'distributed_executor_backend'", "'mp'") in pairs


def test_the_gpu_script_plans_the_replica_it_documents():
    """docker/verl_rollout_gpu.sh's overrides, planned here (``PLAN_ONLY=1``: verl's config
    composed and planned, nothing started): the actor's rank 0 and vLLM replica 0."""
    import subprocess
    import sys

    script = os.path.join(os.path.dirname(__file__), "..", "..", "docker", "verl_rollout_gpu.sh")
    proc = subprocess.run(["bash", script], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PLAN_ONLY": "1", "PYTHON": sys.executable,
                               "COLUMNS": "200"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "rollout_replicas (vllm replicas of 1 GPU(s))" in proc.stdout
    assert "step0002/rollout_replicas/rank0/" in proc.stdout
    assert "step0003/global_pool/rank0/" in proc.stdout


@pytest.mark.parametrize("relpath, name", [
    ("vllm_rollout/vllm_pd_replica.py", "vLLMPDReplica"),
    ("sglang_rollout/sglang_pd_replica.py", "SGLangPDReplica")])
def test_pd_replicas_launch_prefill_then_decode_servers_through_server_class(relpath, name):
    """What verlprof's plan of a PD replica relies on (docs/verl.md): its servers go through
    ``self.server_class`` (the seam), the prefill's first, then the decode servers, and
    ``servers`` lists them in that order (its ranks)."""
    replica = _classes(relpath)[name]
    assert _calls_server_class_options(replica)
    launch = ast.unparse(_method(replica, "launch_servers"))
    assert "self.servers = list(self._prefill_servers) + list(self._decode_servers)" in launch
    assert launch.index("self._prefill_servers = [") < launch.index("self._decode_servers.append(")
