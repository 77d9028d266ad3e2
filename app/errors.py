"""The exceptions gicbench raises. Each carries the offending values so messages are actionable."""

from __future__ import annotations


class GicbenchError(Exception):
    """Base of every gicbench error."""


class ConfigError(GicbenchError, ValueError):
    """Bad user input: names the field, the value given and what is allowed."""

    def __init__(self, field: str, value: object, allowed: str) -> None:
        self.field, self.value, self.allowed = field, value, allowed
        super().__init__(f"invalid {field}={value!r}: allowed {allowed}")


class Refused(GicbenchError):
    """Another rank refused the run in pre-flight (it printed the reason); exit status 2."""


class UnsupportedError(GicbenchError):
    """The platform lacks what a provider or submitter needs (named in the message)."""


class FabricError(GicbenchError):
    """A NIC object could not be created or moved between states."""


class CompletionTimeout(GicbenchError):
    """A completion did not arrive in time; the message carries rank, QP and queue indices."""


class CompletionError(GicbenchError):
    """An error CQE arrived: carries the syndrome and the WQE counter."""

    def __init__(self, message: str, syndrome: int = 0, wqe_counter: int = 0, qpn: int = 0) -> None:
        self.syndrome, self.wqe_counter, self.qpn = syndrome, wqe_counter, qpn
        super().__init__(message)


class ValidationError(GicbenchError):
    """Payload validation failed: data at the target differs from what was sent."""


class TraceError(GicbenchError):
    """A trace is missing, incomplete, of an unknown schema version, or inconsistent."""
