"""`conductor mcp serve`: this project's calculator as an MCP server, for other agents to call.

Over stdio by default (an MCP client starts it as a program), or over streamable HTTP with `--port`.
The tool is the calculator workers use (`conductor.domain.calculator`): exact arithmetic, parsed and
never `eval`ed; text with nothing to compute is the tool's error, so a client's model sees it failed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:  # the MCP SDK is imported when the server starts, not for `--help`
    from mcp.server.mcpserver import MCPServer

app = typer.Typer(no_args_is_help=True, help="MCP: serve this project's tools to other agents.")

CALCULATOR_DESCRIPTION = (
    "Evaluate an arithmetic expression exactly: numbers joined by + - * / and brackets (no powers). "
    "Prose around the expression is allowed; the last expression that evaluates is computed."
)


def calculator_server() -> MCPServer:
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    from conductor.domain.calculator import NO_EXPRESSION, calculate

    server = MCPServer("conductor-calculator", instructions="Exact arithmetic for models that should not compute.")

    @server.tool(description=CALCULATOR_DESCRIPTION)
    def calculator(expression: str) -> str:
        result = calculate([expression])
        if result.text == NO_EXPRESSION:
            raise ToolError(result.text)
        return result.text

    return server


@app.command()
def serve(
    port: Annotated[int | None, typer.Option(help="Serve streamable HTTP on this port instead of stdio.")] = None,
    host: Annotated[str, typer.Option(help="Address to listen on with --port.")] = "127.0.0.1",
) -> None:
    """Serve the calculator tool over MCP (stdio, or streamable HTTP at http://HOST:PORT/mcp)."""
    server = calculator_server()
    if port is None:
        server.run()
    else:
        server.run("streamable-http", host=host, port=port)
