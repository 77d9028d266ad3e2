"""emu's own knobs: which engine serves the queues, where the queues live, and the NIC model
charged for each WQE. The provider declares them (`EmuProvider.Params`), so they are refused
with any other provider."""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import ConfigError
from ...knobs import KIND_STR, knob

ENGINES = ("cpu", "cuda")  # a CPU thread (or inline) or the CUDA engine (a persistent kernel)
QUEUE_PLACEMENTS = ("host", "device")  # where the rings, records, doorbells and CQs live
MAX_ENGINE_CTAS = 4096
MAX_ENGINE_THREADS = 64  # the native Nic's kMaxEngineThreads
ENGINE_THREADS_FIELD = "engine_threads (--engine-threads)"  # how refusals name the knob


@dataclass(frozen=True)
class EmuParams:
    engine: str = knob(
        "cpu",
        flag="--engine",
        kind=KIND_STR,
        choices=ENGINES,
        help="emu engine: cpu (a thread or inline, see --progress) or cuda (a persistent kernel "
        "per rank; one rank per GPU)",
    )
    engine_ctas: int | None = knob(
        None,
        flag="--engine-ctas",
        lo=1,
        hi=MAX_ENGINE_CTAS,
        help="CTAs of 256 threads the CUDA engine keeps resident per rank (default 16)",
    )
    engine_threads: int | None = knob(
        None,
        flag="--engine-threads",
        lo=1,
        hi=MAX_ENGINE_THREADS,
        help="CPU engine threads per rank, each serving its share of the rank's QPs (QP i on "
        "thread i mod N; default 1); needs --progress thread, a core per thread, no NIC model",
    )
    queues: str = knob(
        "host",
        flag="--queues",
        kind=KIND_STR,
        choices=QUEUE_PLACEMENTS,
        help="emu queue placement: host (the rank's shared memory, mapped into the GPU) or "
        "device (GPU memory; needs --engine cuda and a GPU submitter)",
    )
    nic_model: str = knob(
        "none",
        flag="--nic-model",
        kind=KIND_STR,
        help="NIC model charged for each WQE (CPU engine): none (the engine's own speed), a "
        "preset of app/fabric/emu/nic_models.toml (cx7-200g-ib-hopper), or a .toml file of one "
        "model; figures with a model are predictions from its stated constants",
    )

    def __post_init__(self) -> None:
        # checked when the run is planned (exit 2); the progress mode is resolved at pre-flight
        model = None if self.nic_model == "none" else self.nic_model
        why = engine_threads_refusal(self.engine_threads, self.engine, model)
        if why:
            raise ConfigError(ENGINE_THREADS_FIELD, self.engine_threads, why)


def engine_threads_refusal(
    threads: int | None, engine: str, model: str | None, progress: str | None = None
) -> str:
    """Why `threads` CPU engine threads (in range: the knob or EmuFabric checked it) cannot run
    with the other settings ('' when they can): the one rule the knob's planning and EmuFabric
    both apply. `model`: the NIC model's name; `progress` None while it is not resolved yet."""
    if threads is None:
        return ""
    if engine != "cpu":
        return "unset with the CUDA engine (its capacity is engine_ctas, --engine-ctas)"
    if threads > 1 and progress == "inline":
        return "1 with --progress inline (inline progress is one thread)"
    if threads > 1 and model is not None:
        return f"1 with --nic-model {model} (a NIC model is one engine thread's clock)"
    return ""
