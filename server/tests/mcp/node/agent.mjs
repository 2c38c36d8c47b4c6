// MCP clients of the TypeScript SDK (@modelcontextprotocol/sdk), for the e2e tests.
//
// MODE=browserpool: URL (/mcp), TOKEN, SITE: browserpool's own tools over Streamable HTTP.
// MODE=playwright: CDP_URL, TOKEN, SITE: @playwright/mcp spawned over stdio, attached to a
// leased session's cdp_url with --cdp-endpoint and --cdp-header, navigating and snapshotting.
// Prints one JSON object: the tools listed and what each call answered.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { mkdtempSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import os from "node:os";
import path from "node:path";

const { MODE, URL: ENDPOINT, CDP_URL, TOKEN, SITE } = process.env;
const bearer = `Bearer ${TOKEN}`;

function summary(result) {
  return {
    isError: Boolean(result.isError),
    content: result.content.map((c) =>
      c.type === "image"
        ? { type: "image", mimeType: c.mimeType, bytes: Buffer.from(c.data, "base64").length }
        : { type: c.type, text: c.text },
    ),
  };
}

async function browserpool() {
  const transport = new StreamableHTTPClientTransport(new URL(ENDPOINT), {
    requestInit: { headers: { Authorization: bearer } },
  });
  const client = new Client({ name: "ts-agent", version: "1.0.0" });
  await client.connect(transport);
  const tools = (await client.listTools()).tools.map((t) => t.name);
  const calls = [];
  const call = async (name, args) => calls.push(summary(await client.callTool({ name, arguments: args })));
  await call("browser", { action: "navigate", payload: `${SITE}/` });
  await call("browser", { action: "fill", selector: "#name", payload: "Kay" });
  await call("browser", { action: "click", selector: "#go" });
  await call("browser", { action: "extract", selector: "#greeting" });
  await call("browser_screenshot", { format: "jpeg", quality: 50 });
  await call("browser", { action: "clik", selector: "#go" });
  // Ends the MCP session (DELETE): its browser is released.
  await transport.terminateSession();
  await client.close();
  return { protocolVersion: transport.protocolVersion, tools, calls };
}

async function playwright() {
  const require = createRequire(import.meta.url);
  const cli = path.join(path.dirname(require.resolve("@playwright/mcp/package.json")), "cli.js");
  // Its snapshots and console logs go to a directory of this run, removed after.
  const output = mkdtempSync(path.join(os.tmpdir(), "playwright-mcp-"));
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [cli, "--cdp-endpoint", CDP_URL, "--cdp-header", `Authorization: ${bearer}`, "--output-dir", output],
    stderr: "inherit",
  });
  const client = new Client({ name: "playwright-row", version: "1.0.0" });
  await client.connect(transport);
  const tools = (await client.listTools()).tools.map((t) => t.name);
  const calls = [];
  const call = async (name, args) => calls.push(summary(await client.callTool({ name, arguments: args })));
  await call("browser_navigate", { url: `${SITE}/` });
  await call("browser_snapshot", {});
  await client.close();
  rmSync(output, { recursive: true, force: true });
  return { tools, calls };
}

const report = MODE === "playwright" ? await playwright() : await browserpool();
console.log(JSON.stringify(report));
process.exit(0);
