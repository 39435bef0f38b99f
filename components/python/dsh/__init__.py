"""dsh: Python client, component and watcher libraries for the dsh tool
broker, on its wire protocol (schemas/PROTOCOL.md).

    Client / AsyncClient   list and call tools through a broker
    Component              serve Python functions as tools
    Watcher                follow the tool set (the Clone procedure)
    render, Tools          the tool list as OpenAI, Anthropic, MCP or markdown
"""

from .client import AsyncClient, CallHandle, Client, DshError
from .component import Component, Context, ToolError
from .render import Tools, render
from .result import Result
from .trace import TraceContext, parse_traceparent
from .watcher import AsyncWatcher, Watcher

__all__ = ["AsyncClient", "AsyncWatcher", "CallHandle", "Client", "Component", "Context", "DshError", "Result", "ToolError",
           "Tools", "TraceContext", "Watcher", "parse_traceparent", "render"]
