"""An agent's MCP session against browserpool's /mcp, with the official Python SDK (PyPI mcp).

Env: URL (the /mcp endpoint), TOKEN (a Bearer token), SITE (the fixture site). Prints one JSON
object: the protocol version, the tools, and what each browser call answered.
"""
import asyncio
import base64
import json
import os

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client


def content(result):
    out = []
    for c in result.content:
        if c.type == "text":
            out.append({"type": "text", "text": c.text})
        elif c.type == "image":
            png = base64.b64decode(c.data)
            out.append({"type": "image", "mime": c.mime_type, "width": int.from_bytes(png[16:20], "big"),
                        "height": int.from_bytes(png[20:24], "big")})
    return {"is_error": bool(result.is_error), "content": out}


async def main():
    site = os.environ["SITE"]
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {os.environ['TOKEN']}"}, timeout=120)
    report = {}
    async with Client(streamable_http_client(os.environ["URL"], http_client=http)) as client:
        tools = await client.list_tools()
        report["tools"] = [{"name": t.name, "description": t.description, "schema": t.input_schema} for t in tools.tools]
        calls = [
            {"action": "navigate", "payload": f"{site}/"},
            {"action": "type", "selector": "#name", "payload": "Ada"},
            {"action": "click", "selector": "#go"},
            {"action": "extract", "selector": "#greeting"},
            {"action": "screenshot"},
            {"action": "navigte", "payload": f"{site}/"},
            {"action": "navigate", "payload": f"{site}/dialogs"},
            {"action": "click", "selector": "#confirm"},
            {"action": "click", "selector": "dialog::accept"},
            {"action": "extract", "selector": "#out"},
        ]
        report["calls"] = []
        for args in calls:
            report["calls"].append(content(await client.call_tool("browser", args)))
    print(json.dumps(report))


asyncio.run(main())
