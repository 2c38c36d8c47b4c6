"""An agent's MCP session against browserpool, with the official Python SDK (PyPI mcp).

Reads a scenario (JSON) from the SCENARIO variable:
  transport: "http" (url, token, headers) or "stdio" (command, args, env)
  steps: a list of {"tool": name, "args": {...}, "progress": bool} or {"sleep": seconds}
Prints one JSON object: the protocol version, the tools, and what each step answered (its
content, whether it is an error, the progress messages it got, or the exception it raised).
"""
import asyncio
import base64
import json
import os
import ssl

import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client


def content(result):
    out = []
    for c in result.content:
        if c.type == "text":
            out.append({"type": "text", "text": c.text})
        elif c.type == "image":
            data = base64.b64decode(c.data)
            item = {"type": "image", "mime": c.mime_type, "bytes": len(data)}
            if data[:8] == b"\x89PNG\r\n\x1a\n":
                item["width"] = int.from_bytes(data[16:20], "big")
                item["height"] = int.from_bytes(data[20:24], "big")
            out.append(item)
    return {"is_error": bool(result.is_error), "content": out}


def transport(scenario):
    if scenario.get("transport", "http") == "stdio":
        return StdioServerParameters(command=scenario["command"], args=scenario.get("args", []), env=scenario.get("env"))
    headers = {"Authorization": f"Bearer {scenario['token']}", **scenario.get("headers", {})}
    options = {}
    # fresh_connections: a new connection per request (each may reach another replica).
    if scenario.get("fresh_connections"):
        options["limits"] = httpx2.Limits(max_keepalive_connections=0)
    # ca_file: https with the server's certificate checked against it.
    if scenario.get("ca_file"):
        options["verify"] = ssl.create_default_context(cafile=scenario["ca_file"])
    http = httpx2.AsyncClient(headers=headers, timeout=120, **options)
    return streamable_http_client(scenario["url"], http_client=http)


async def main():
    scenario = json.loads(os.environ["SCENARIO"])
    report = {"steps": []}
    async with Client(transport(scenario)) as client:
        tools = await client.list_tools()
        report["tools"] = [{"name": t.name, "description": t.description, "schema": t.input_schema} for t in tools.tools]
        for step in scenario.get("steps", []):
            if "sleep" in step:
                await asyncio.sleep(step["sleep"])
                report["steps"].append({"slept": step["sleep"]})
                print(json.dumps({"step": len(report["steps"]) - 1, "slept": step["sleep"]}), flush=True)
                continue
            progress = []

            async def noted(done, total, message):
                progress.append(message)

            callback = noted if step.get("progress") else None
            try:
                result = await client.call_tool(step["tool"], step.get("args", {}), progress_callback=callback)
                answer = content(result)
            except Exception as e:  # a protocol error is what the step answered
                answer = {"exception": f"{type(e).__name__}: {e}"}
            answer["progress"] = progress
            report["steps"].append(answer)
            print(json.dumps({"step": len(report["steps"]) - 1, **answer}), flush=True)
    print(json.dumps(report), flush=True)


asyncio.run(main())
