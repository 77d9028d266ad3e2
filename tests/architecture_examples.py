"""The two worked examples of docs/architecture.md (a new experiment, a new submitter), taken
from the page's python blocks and registered for the length of a test, so the page cannot drift
from the code."""

from __future__ import annotations

import re
import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from gicbench.experiments import registry as experiments
from gicbench.submit import base as submitters

PAGE = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"


def blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.S)


@contextmanager
def registered() -> Iterator[tuple[type, type]]:
    """Both examples registered (experiment batch-sweep, submitter serial), then removed."""
    experiments.names()
    submitters.names()  # load the real ones first
    (exp_src, sub_src) = blocks()
    made = []
    try:
        for name, src in (("gicbench_example_experiment", exp_src),
                          ("gicbench_example_submitter", sub_src)):  # fmt: skip
            mod = types.ModuleType(name)
            sys.modules[name] = mod  # dataclasses look their module up
            # dont_inherit: the page's code as written, not under this file's __future__ flags
            exec(compile(src, f"{PAGE}:{name}", "exec", dont_inherit=True), mod.__dict__)
            made.append(mod)
        yield made[0].BatchSweep, made[1].SerialSubmitter
    finally:
        experiments._REGISTRY.pop("batch-sweep", None)
        submitters._REGISTRY.pop("serial", None)
        for mod in made:
            sys.modules.pop(mod.__name__, None)
