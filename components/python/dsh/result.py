"""A call's one answer, as the caller sees it: a RESULT body with accessors.

Failures are results too (PROTOCOL.md, Result format): a caller decides by
is_error and code, never by catching an exception; so an error's class is
its code (RATE_LIMITED, ...) and error_name, not a Python exception type.
"""

from . import protocol
from .trace import parse_traceparent


class Result:
    """The RESULT of one call: content blocks, structuredContent, and on
    failure error.code. body is the RESULT map as it came."""

    __slots__ = ("body",)

    def __init__(self, body):
        self.body = body

    @property
    def call_id(self):
        return self.body.get("callId", "")

    @property
    def is_error(self):
        return self.body.get("isError") is True

    @property
    def code(self):
        """error.code of a failed result (None when it succeeded; TOOL_FAILED
        for a failure without an error map, as the broker counts it)."""
        error = self.body.get("error")
        if isinstance(error, dict) and isinstance(error.get("code"), str):
            return error["code"]
        return "TOOL_FAILED" if self.is_error else None

    @property
    def error_name(self):
        """error.name of a failed result, from the definition's table by its
        code (e.g. RateLimitedError for RATE_LIMITED); None when it succeeded."""
        if not self.is_error:
            return None
        return protocol.ERROR_NAMES.get(self.code, protocol.UNKNOWN_ERROR_NAME)

    @property
    def retry_after_ms(self):
        """error.retryAfterMs of a RATE_LIMITED result: the ms until the
        limit that refused the call admits one again; None if it has none
        (a cap on calls in flight refused it, or it is no such result)."""
        error = self.body.get("error")
        value = error.get("retryAfterMs") if isinstance(error, dict) else None
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
        return None

    @property
    def trace(self):
        """The trace context the RESULT carries back (its traceparent and
        tracestate: the broker's span for the call), a dsh.trace.TraceContext,
        or None."""
        return parse_traceparent(self.body.get("traceparent"), self.body.get("tracestate"))

    @property
    def traceparent(self):
        """The traceparent the RESULT carries back, or None."""
        trace = self.trace
        return trace.traceparent if trace else None

    @property
    def content(self):
        content = self.body.get("content")
        return content if isinstance(content, list) else []

    @property
    def structured(self):
        return self.body.get("structuredContent")

    @property
    def text(self):
        """The text blocks joined with newlines."""
        return "\n".join(block["text"] for block in self.content
                         if isinstance(block, dict) and block.get("type") == "text"
                         and isinstance(block.get("text"), str))

    @property
    def message(self):
        """What went wrong (the text of a failed result), else None."""
        return self.text if self.is_error else None

    def __repr__(self):
        if self.is_error:
            return "Result(%s, %r)" % (self.code, self.text)
        return "Result(ok, %r)" % (self.text if self.structured is None else self.structured,)
