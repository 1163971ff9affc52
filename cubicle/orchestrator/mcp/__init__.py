"""``cubicle mcp``: cubicle's desktops as MCP tools, for any MCP client (Claude Desktop, Cursor,
the OpenAI Agents SDK...). See docs/mcp.md.

- :mod:`.schemas`: every tool's arguments (pydantic models: the listed schema and the validator);
- :mod:`.tools`: the tool table, and each tool's handler;
- :mod:`.desktops`: the sandboxes the server owns (created, used one call at a time, removed);
- :mod:`.auth`: the HTTP transport's bearer token;
- :mod:`.server`: the MCP server, on stdio or streamable HTTP, and its teardown;
- :mod:`.cli`: the ``cubicle mcp`` subcommand.
"""
