"""What each registered provider and submitter can do on this machine (doctor, pre-flight)."""

from __future__ import annotations

from collections.abc import Mapping

from ..platform import Probe
from . import registry
from .base import ProviderCaps


def provider_caps(probes: Mapping[str, Probe]) -> list[ProviderCaps]:
    return [registry.get(n).caps(probes) for n in registry.names()]


def submitter_caps(probes: Mapping[str, Probe]) -> list[ProviderCaps]:
    from ..submit import base as submitters

    return [submitters.get(n).caps(probes) for n in submitters.names()]
