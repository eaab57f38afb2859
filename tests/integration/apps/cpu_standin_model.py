"""The stand-in engine's model and engine loop: torch and nvtx only (no verl, no Ray), so that
an engine process spawned by a server starts in seconds, as vLLM's EngineCore is spawned by its
server.

``LocalEngine`` generates with a tiny random model, each call inside ``nvtx.annotate("generate")``
and ``record_function("cpu_standin.generate")``, and runs the torch profiler on request;
``SpawnedEngine`` is the same interface served by a child process (``multiprocessing`` spawn).
"""

from __future__ import annotations

import multiprocessing
import os
import socket
import threading
import time
from typing import Any, List, Optional, Sequence, Tuple

import nvtx
import torch


class TinyLM(torch.nn.Module):
    """A few layers of random weights over the tokenizer's vocabulary."""

    def __init__(self, vocab_size: int, hidden: int = 32, layers: int = 2, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.embed = torch.nn.Embedding(vocab_size, hidden)
        self.layers = torch.nn.ModuleList(torch.nn.Linear(hidden, hidden) for _ in range(layers))
        self.head = torch.nn.Linear(hidden, vocab_size)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.embed(ids).cumsum(0) / torch.arange(1, len(ids) + 1).unsqueeze(1)
        for layer in self.layers:
            h = torch.tanh(layer(h))
        return self.head(h)

    @torch.no_grad()
    def sample(self, prompt: Sequence[int], max_tokens: int, temperature: float,
               eos: Optional[int], seed: int,
               on_token: Any = None) -> Tuple[List[int], List[float]]:
        generator = torch.Generator().manual_seed(seed)
        ids, out, logprobs = torch.tensor(list(prompt)), [], []
        for _ in range(max_tokens):
            if on_token is not None:  # one engine iteration per generated token
                on_token()
            with torch.profiler.record_function("cpu_standin.token"):
                logits = self.forward(ids)[-1]
            if temperature > 0:
                probs = torch.softmax(logits / temperature, -1)
                token = int(torch.multinomial(probs, 1, generator=generator))
            else:
                token = int(logits.argmax())
            logprobs.append(float(torch.log_softmax(logits, -1)[token]))
            out.append(token)
            ids = torch.cat([ids, torch.tensor([token])])
            if token == eos:
                break
        return out, logprobs


class LocalEngine:
    """The engine in the calling process."""

    def __init__(self, vocab_size: int, seed: int, eos: Optional[int]):
        torch.set_num_threads(1)
        self.model, self.eos, self.profiler = TinyLM(vocab_size, seed=seed), eos, None
        self.window: Tuple[int, int] = (0, 0)
        """vLLM's ``delay_iterations`` / ``max_iterations`` (0: no bound)."""
        self.iteration, self.contents = 0, ()  # type: Tuple[int, Sequence[str]]
        self.armed = self.recording = False

    def pid(self) -> int:
        return os.getpid()

    def generate(self, prompt: Sequence[int], max_tokens: int, temperature: float,
                 seed: int) -> Tuple[List[int], List[float]]:
        with nvtx.annotate("generate", color="green"), \
                torch.profiler.record_function("cpu_standin.generate"):
            return self.model.sample(prompt, max_tokens, temperature, self.eos, seed,
                                     self._iterate)

    def _iterate(self) -> None:
        """An engine iteration: vLLM's profiler records iterations ``delay_iterations`` to
        ``delay_iterations + max_iterations`` (exclusive; 0: to the end) of its window."""
        delay, most = self.window
        if self.armed and self.profiler is None and self.iteration == delay:
            self._start()
        if self.recording and most and self.iteration == delay + most:
            self.profiler.stop()
            self.recording = False
        self.iteration += 1

    def _start(self) -> None:
        contents = self.contents
        self.profiler = torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU], record_shapes="shapes" in contents,
            with_stack="stack" in contents, profile_memory="memory" in contents)
        self.profiler.start()
        self.recording = True

    def start_profile(self, contents: Sequence[str], delay: int = 0, most: int = 0) -> None:
        self.contents, self.window, self.iteration, self.armed = tuple(contents), (delay, most), \
            0, True
        if delay == 0:
            self._start()

    def stop_profile(self, directory: str) -> str:
        """Stops the profiler and writes its trace into ``directory`` as vLLM names them."""
        profiler, self.profiler, self.armed = self.profiler, None, False
        if profiler is None:  # the window began after the last iteration: nothing recorded
            return ""
        if self.recording:
            profiler.stop()
            self.recording = False
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, f"{socket.gethostname()}_{os.getpid()}."
                                       f"{time.time_ns()}.pt.trace.json")
        profiler.export_chrome_trace(path)
        return path


def _serve(conn: Any, vocab_size: int, seed: int, eos: Optional[int]) -> None:
    engine = LocalEngine(vocab_size, seed, eos)
    while True:
        method, args = conn.recv()
        if method == "exit":
            return
        conn.send(getattr(engine, method)(*args))


class SpawnedEngine:
    """``LocalEngine``'s interface, served by a spawned child process (one call at a time)."""

    def __init__(self, vocab_size: int, seed: int, eos: Optional[int]):
        context = multiprocessing.get_context("spawn")
        self.conn, child = context.Pipe()
        self.process = context.Process(target=_serve, args=(child, vocab_size, seed, eos),
                                       daemon=True, name="cpu_standin_engine")
        self.process.start()
        self.lock = threading.Lock()

    def _call(self, method: str, *args: Any) -> Any:
        with self.lock:
            self.conn.send((method, args))
            return self.conn.recv()

    def __getattr__(self, method: str) -> Any:
        if method in ("pid", "generate", "start_profile", "stop_profile"):
            return lambda *args: self._call(method, *args)
        raise AttributeError(method)

    def close(self) -> None:
        with self.lock:
            self.conn.send(("exit", ()))
        self.process.join(timeout=10)
