"""Owns `stratagem mcp`: the harness offered to any agent as an MCP server (docs/agents.md).

`records` (the tools' typed results and the failure record), `inputs` (checking a tool's
arguments, each error naming the argument at fault), `harness` (evaluate, baselines, runs
read from their databases, export), `runs` (runs started in the background as `stratagem
run` processes: start, watch, stop) and `server` (the tools on the official MCP SDK's
`MCPServer`, over stdio or streamable HTTP on localhost). Only `server` imports the SDK;
importing this package imports nothing.
"""
