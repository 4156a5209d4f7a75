"""One error tree for the whole system; transports map these to exit codes / HTTP statuses."""

from __future__ import annotations

import re


class ConductorError(Exception):
    """Base of every error this project raises on purpose."""


class ConfigError(ConductorError):
    """Settings or a pool file are invalid."""


class PlanParseError(ConductorError):
    """The Conductor's completion holds no valid workflow."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail


class ModelCallError(ConductorError):
    """A model call (a worker's or the Conductor's) failed after its retries (and fallbacks)."""

    def __init__(self, message: str, *, retryable: bool = False, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.retry_after = retry_after


class RateLimited(ModelCallError):
    """A cluster-wide rate limit or concurrency cap would make this call wait too long: come back later."""

    def __init__(self, message: str, *, retry_after: float) -> None:
        super().__init__(message, retryable=True, retry_after=retry_after)
        self.retry_after: float = retry_after


class ModelServerUnreachable(ModelCallError):
    """A model server refused the connection or never accepted it, on every attempt of a call."""

    def __init__(self, label: str, url: str, detail: str, *, attempts: int) -> None:
        detail = " ".join(detail.replace("(", "[").replace(")", "]").split())[:120]
        tries = f"{attempts} attempt{'s' if attempts != 1 else ''}"
        self.reason = f"cannot reach the model server at {url} ({detail}, {tries}): {_CHECK}"
        # Not retryable later either: a server nobody can connect to is a setting to fix, said at once.
        super().__init__(f"{label}: {self.reason}", retryable=False)
        self.url = url

    @staticmethod
    def reason_in(text: str | None) -> str | None:
        """The unreachable-server sentence inside a recorded failure reason, however much the
        pipeline wrapped it (`sample 0: step 1 failed: alpha: ...`), so the CLI can print it alone."""
        match = _UNREACHABLE.search(text or "")
        return match.group(0) if match else None


_CHECK = "is it running, and is api_base in the pool file right?"
_UNREACHABLE = re.compile(r"cannot reach the model server at \S+ \([^()]*\): " + re.escape(_CHECK))


class BudgetExceeded(ConductorError):
    """A job ran out of its model-call, token or cost budget (the job ends as `budget_exceeded`)."""

    def __init__(self, detail: str) -> None:
        super().__init__(f"budget exhausted: {detail}")
        self.detail = detail


class JobNotFinished(ConductorError):
    """Scoring needs every chain of the job to have ended."""


class AnswerFormatError(ConductorError):
    """A final answer is not what the client's response format or tools asked for."""


class VllmServerError(ConductorError):
    """The vLLM server could not start, or refused a request."""


class InputError(ConductorError):
    """A problem file, a line or a request cannot be read; `param` names the request field at fault."""

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


class DestinationRefused(InputError):
    """An outbound URL (a webhook's) resolves to an address that is not public nor allowed."""


class NotFound(ConductorError):
    """A job, batch or other record does not exist."""


class QuotaExceeded(ConductorError):
    """A tenant's quota (concurrent jobs, tokens or dollars per day) is spent: retry after `retry_after` s."""

    def __init__(self, message: str, *, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class Conflict(ConductorError):
    """The record is in a state that does not allow this (e.g. cancelling a finished batch)."""


class VerifierError(ConductorError):
    """A verifier could not reach a verdict."""


class TrainingError(ConductorError):
    """Dataset export or GRPO training failed."""


class SandboxSetupError(ConductorError):
    """The code sandbox could not be set up (not the program's fault, so no verdict)."""


class MathCheckTimeout(ConductorError):
    """A math-equivalence check did not answer in time (its child process was killed)."""
