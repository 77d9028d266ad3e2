"""docs/interfaces.md and docs/architecture.md name only what exists: every repository path they
mention is there, and every Python name (a class, `Class.attr`, a `function(...)`) is defined in
gicbench, so the pages cannot keep names the code no longer has."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import pytest

import gicbench

ROOT = Path(__file__).resolve().parents[1]
PAGES = ("docs/interfaces.md", "docs/architecture.md")
CODE_SPAN = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
NAME = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)(\(.*\))?$")
PATH = re.compile(r"^(?:app|analysis|cuda|native|proxy|jobs|tests|docs|bench)/[\w./-]*$")


def _modules() -> list[object]:
    mods = []
    for info in pkgutil.walk_packages(gicbench.__path__, "gicbench."):
        if info.name.endswith("__main__"):  # runs the CLI when imported
            continue
        try:
            mods.append(importlib.import_module(info.name))
        except ImportError:  # an optional native part (verbs) or a GPU-only import
            continue
    return mods


def _namespace() -> tuple[dict[str, object], set[str]]:
    """Module-level names of every gicbench module, and the attribute names of its classes."""
    names: dict[str, object] = {}
    attrs: set[str] = set()
    for mod in _modules():
        names[mod.__name__.rsplit(".", 1)[1]] = mod
        for key, value in vars(mod).items():
            names.setdefault(key, value)
            if inspect.isclass(value) and value.__module__.startswith("gicbench"):
                attrs |= set(dir(value)) | set(getattr(value, "__annotations__", {}))
    return names, attrs


def _spans(page: str) -> list[str]:
    text = (ROOT / page).read_text()
    text = re.sub(r"```.*?```", "", text, flags=re.S)  # code blocks are examples, not names
    return CODE_SPAN.findall(text)


FILE_SUFFIXES = ("py", "toml", "json", "md", "h", "hpp", "cpp", "cu", "cuh", "h5", "sbatch")


def _python_names(span: str) -> list[str]:
    out = []
    for part in span.split(" -> "):
        m = NAME.match(part.strip())
        if m is None or m[1].rsplit(".", 1)[-1] in FILE_SUFFIXES:  # a file's name
            continue
        if any(c.isupper() for c in m[1]) or "." in m[1] or m[2] is not None:
            out.append(m[1])
    return out


@pytest.mark.parametrize("page", PAGES)
def test_every_path_the_page_mentions_exists(page: str) -> None:
    missing = [s for s in _spans(page) if PATH.match(s) and not (ROOT / s).exists()]
    assert not missing, f"{page} mentions paths that do not exist: {missing}"


@pytest.mark.parametrize("page", PAGES)
def test_every_name_the_page_mentions_is_defined(page: str) -> None:
    names, attrs = _namespace()
    missing = []
    for span in _spans(page):
        for dotted in _python_names(span):
            head, *rest = dotted.split(".")
            obj = names.get(head)
            if obj is None:
                if not rest and head in attrs:  # a method or field named on its own
                    continue
                missing.append(dotted)
                continue
            for part in rest:
                if not hasattr(obj, part) and part not in getattr(obj, "__annotations__", {}):
                    missing.append(dotted)
                    break
                obj = getattr(obj, part, None)
    assert not missing, f"{page} names what gicbench does not define: {sorted(set(missing))}"


def test_the_checks_catch_a_stale_name(tmp_path: Path) -> None:
    names, attrs = _namespace()
    assert "LatencyWork" in names and "lanes_to" in attrs
    assert _python_names("GpuLoadedWork") == ["GpuLoadedWork"] and "GpuLoadedWork" not in names
    assert _python_names("--rings") == [] and _python_names("emu") == []
