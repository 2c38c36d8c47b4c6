/**
 * browserpool client for Node 20: the `Sessions` and `Admin` stubs generated from
 * proto/browserpool/v1 (protoc-gen-es, in `gen/`), over real gRPC (HTTP/2) with
 * `@connectrpc/connect-node`, plus a thin helper: {@link connect} attaches
 * `authorization: Bearer <jwt>` to every call, {@link withSession} acquires a browser and
 * releases it when the callback settles, whether it returned or threw.
 *
 * ```js
 * import { connect, withSession } from "browserpool";
 * const client = connect("http://127.0.0.1:50051", process.env.TOKEN);
 * await withSession(client, { waitMs: 10_000 }, async (s) => {
 *   await s.act("navigate", "", "https://example.com/");
 *   console.log(await s.value("extract", "h1"));
 * });
 * ```
 *
 * Whole-call failures (a bad token, an unknown session, no free browser in time) reject with
 * `ConnectError`, whose `code` is the gRPC status (`Code.Unauthenticated`...); an action that
 * ran and failed rejects with {@link ActionError}.
 */

import { readFileSync } from "node:fs";
import type * as http2 from "node:http2";

import { create, fromJson, toJson, type JsonValue, type MessageInitShape } from "@bufbuild/protobuf";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";

import { Admin } from "../gen/browserpool/v1/admin_pb.js";
import {
  ActionSchema,
  ArtifactKind,
  ErrorCode,
  Record,
  SessionState,
  type Action,
  type ActionResult,
  type Artifact,
  type Session,
} from "../gen/browserpool/v1/common_pb.js";
import {
  LiveViewMode,
  Sessions,
  type AcquireRequestSchema,
  type LiveViewLink,
  type ReleaseResponse,
} from "../gen/browserpool/v1/sessions_pb.js";

export { Code, ConnectError, ErrorCode, SessionState, Sessions, Admin, ArtifactKind, Record, LiveViewMode };
export type { Action, ActionResult, Artifact, Session, JsonValue, LiveViewLink };

/** How to reach the server besides its URL. */
export interface ConnectOptions {
  /** PEM file of the CA(s) the server's certificate must chain to (`https://` URLs). */
  caFile?: string;
  /** The same as PEM text or bytes, instead of a file. */
  ca?: string | Buffer;
  /** Client certificate and key (PEM files), for a server with mutual TLS (`--tls-client-ca`). */
  certFile?: string;
  keyFile?: string;
  /** Name the server's certificate must carry; default: the URL's host. */
  serverName?: string;
  /** More interceptors, run after the bearer one. */
  interceptors?: Interceptor[];
}

/** A connected client: the generated stubs with the token attached, and `close()`. */
export interface BrowserpoolClient {
  /** `browserpool.v1.Sessions`: acquire, act, drive, release... */
  sessions: Client<typeof Sessions>;
  /** `browserpool.v1.Admin` (needs a token with scope `admin`). */
  admin: Client<typeof Admin>;
  /** Closes the HTTP/2 connection (an idle one does not keep the process alive anyway). */
  close(): void;
}

/** An interceptor that sends `authorization: Bearer <token>` with every call. */
export function bearer(token: string): Interceptor {
  const value = `Bearer ${token.trim()}`;
  return (next) => async (req) => {
    req.header.set("authorization", value);
    return next(req);
  };
}

/**
 * Connects to `url` (`http://host:port` for plaintext, `https://host:port` for TLS) with a
 * JWT. The connection is made on the first call.
 */
export function connect(url: string, token: string, opts: ConnectOptions = {}): BrowserpoolClient {
  const nodeOptions: http2.SecureClientSessionOptions = {};
  if (opts.caFile !== undefined) nodeOptions.ca = readFileSync(opts.caFile);
  if (opts.ca !== undefined) nodeOptions.ca = opts.ca;
  if (opts.certFile !== undefined) nodeOptions.cert = readFileSync(opts.certFile);
  if (opts.keyFile !== undefined) nodeOptions.key = readFileSync(opts.keyFile);
  if (opts.serverName !== undefined) nodeOptions.servername = opts.serverName;
  const sessionManager = new Http2SessionManager(url, {}, nodeOptions);
  const transport = createGrpcTransport({
    baseUrl: url,
    sessionManager,
    interceptors: [bearer(token), ...(opts.interceptors ?? [])],
  });
  return {
    sessions: createClient(Sessions, transport),
    admin: createClient(Admin, transport),
    close: () => sessionManager.abort(),
  };
}

/** Per-action options besides name, selector and payload. */
export interface ActOptions {
  /** The action's own deadline in ms; 0 or unset = the server's default (30 s). */
  timeoutMs?: number;
  /** Correlation id, echoed in the result. */
  id?: string;
}

/**
 * Throws a TypeError naming `field` and what it takes when `value` is not of `kind` (at run
 * time, for JavaScript callers the types do not reach).
 */
function expect(field: string, value: unknown, kind: "string" | "number", what: string): void {
  if (value !== undefined && typeof value !== kind) {
    throw new TypeError(`${field}: expected ${what}, got ${typeof value} ${JSON.stringify(value)}`);
  }
}

/** Builds an action: name, selector (CSS, text=, role=, xpath=...; may be empty) and a JSON payload (may be omitted). */
export function action(name: string, selector = "", payload?: JsonValue, opts: ActOptions = {}): Action {
  expect("action", name, "string", "a string (the action's name)");
  expect("selector", selector, "string", "a string (a selector, or \"\")");
  expect("timeoutMs", opts.timeoutMs, "number", "a number (milliseconds)");
  return create(ActionSchema, {
    action: name,
    selector,
    payload: payload === undefined ? undefined : fromJson(ValueSchema, payload),
    timeoutMs: opts.timeoutMs ?? 0,
    id: opts.id ?? "",
  });
}

/** A session state as its name: `stateName(r.state) === "CLOSED"`. */
export function stateName(state: SessionState): string {
  return (SessionState[state] ?? String(state)).replace(/^SESSION_STATE_/, "");
}

/**
 * An action that ran and failed (`ok=false`): `code` says why (`codeName` its name),
 * `didYouMean` the server's suggestions for a misspelt action or option (also in the message),
 * `result` has the rest.
 */
export class ActionError extends Error {
  readonly code: ErrorCode;
  readonly codeName: string;
  readonly didYouMean: string[];
  readonly result: ActionResult;

  constructor(result: ActionResult) {
    const code = result.error?.code ?? ErrorCode.UNSPECIFIED;
    const didYouMean = [...(result.error?.didYouMean ?? [])];
    const hint = didYouMean.length > 0 ? ` (did you mean: ${didYouMean.join(", ")}?)` : "";
    super(`${result.action}: ${ErrorCode[code]}: ${result.error?.message ?? ""}${hint}`);
    this.name = "ActionError";
    this.code = code;
    this.codeName = `ERROR_CODE_${ErrorCode[code]}`;
    this.didYouMean = didYouMean;
    this.result = result;
  }
}

/** A leased browser, as {@link withSession} hands it out. */
export class LeasedSession {
  /** The session as Acquire returned it (id, cdp_url, deadlines...). */
  readonly info: Session;

  constructor(
    readonly client: BrowserpoolClient,
    info: Session,
  ) {
    this.info = info;
  }

  /** The session id. */
  get id(): string {
    return this.info.sessionId;
  }

  /** Runs one action; rejects with {@link ActionError} when it fails. */
  async act(name: string, selector = "", payload?: JsonValue, opts: ActOptions = {}): Promise<ActionResult> {
    const result = await this.client.sessions.act({
      sessionId: this.id,
      action: action(name, selector, payload, opts),
    });
    if (!result.ok) throw new ActionError(result);
    return result;
  }

  /** Runs one action and returns its JSON value (`null` when it has none). */
  async value(name: string, selector = "", payload?: JsonValue, opts: ActOptions = {}): Promise<JsonValue> {
    const result = await this.act(name, selector, payload, opts);
    return result.value === undefined ? null : toJson(ValueSchema, result.value);
  }

  /** Reads the session again (state, deadlines). */
  async get(): Promise<Session> {
    return this.client.sessions.get({ sessionId: this.id });
  }

  /** Releases the session now (idempotent; {@link withSession} does it anyway). */
  async release(): Promise<ReleaseResponse> {
    return this.client.sessions.release({ sessionId: this.id });
  }
}

/** Acquire's fields (`waitMs`, `ttlMs`, `labels`, `viewport`...), all optional. */
export type AcquireOptions = MessageInitShape<typeof AcquireRequestSchema>;

/**
 * Acquires a browser, runs `fn` with it and releases it when `fn` settles, also when it
 * throws (then `fn`'s error is the one that propagates, even if the release fails too).
 * Returns what `fn` returns.
 */
export async function withSession<T>(
  client: BrowserpoolClient,
  opts: AcquireOptions,
  fn: (session: LeasedSession) => Promise<T>,
): Promise<T> {
  expect("waitMs", opts.waitMs, "number", "a number (milliseconds)");
  expect("ttlMs", opts.ttlMs, "number", "a number (milliseconds)");
  expect("idleTimeoutMs", opts.idleTimeoutMs, "number", "a number (milliseconds)");
  const session = new LeasedSession(client, await client.sessions.acquire(opts));
  let result: T;
  try {
    result = await fn(session);
  } catch (err) {
    await session.release().catch(() => {});
    throw err;
  }
  await session.release();
  return result;
}

/** The size of each message of {@link putFile}. */
const FILE_CHUNK = 1 << 20;

/**
 * Uploads `data` as file `name` of the session (in 1 MiB messages); a file input takes it with
 * the `set_input_files` action.
 */
export async function putFile(
  client: BrowserpoolClient,
  sessionId: string,
  name: string,
  data: Uint8Array,
): Promise<Artifact> {
  async function* messages() {
    let offset = 0;
    do {
      const chunk = data.subarray(offset, offset + FILE_CHUNK);
      yield offset === 0 ? { sessionId, name, chunk } : { chunk };
      offset += FILE_CHUNK;
    } while (offset < data.length);
  }
  return client.sessions.putFile(messages());
}

/** One file of the session (live, or kept after its end), whole, with its artifact. */
export async function getFile(
  client: BrowserpoolClient,
  sessionId: string,
  name: string,
): Promise<{ artifact: Artifact; data: Buffer }> {
  return download(client, { sessionId, name });
}

/** The recording (WebM) of an ended session, whole, with its artifact. */
export async function getRecording(
  client: BrowserpoolClient,
  sessionId: string,
): Promise<{ artifact: Artifact; data: Buffer }> {
  return download(client, { sessionId, kind: ArtifactKind.RECORDING });
}

/** Deletes what an ended session kept (its files and recording); how many. */
export async function deleteArtifacts(client: BrowserpoolClient, sessionId: string): Promise<number> {
  return (await client.sessions.deleteArtifacts({ sessionId })).deleted;
}

/** A link to watch the live session in a web browser (`control`: to drive it too), working for `ttlMs` (0: 15 minutes; never past the session's end). */
export async function liveView(
  client: BrowserpoolClient,
  sessionId: string,
  opts: { control?: boolean; ttlMs?: number } = {},
): Promise<LiveViewLink> {
  const mode = opts.control ? LiveViewMode.CONTROL : LiveViewMode.VIEW;
  return client.sessions.liveView({ sessionId, mode, ttlMs: opts.ttlMs ?? 0 });
}

/** Revokes one live view link of the session (every one when `linkId` is empty); how many. */
export async function revokeLiveView(client: BrowserpoolClient, sessionId: string, linkId = ""): Promise<number> {
  return (await client.sessions.revokeLiveView({ sessionId, linkId })).revoked;
}

async function download(
  client: BrowserpoolClient,
  req: { sessionId: string; name?: string; kind?: ArtifactKind },
): Promise<{ artifact: Artifact; data: Buffer }> {
  let artifact: Artifact | undefined;
  const parts: Uint8Array[] = [];
  for await (const message of client.sessions.getFile(req)) {
    artifact ??= message.artifact;
    parts.push(message.chunk);
  }
  if (!artifact) throw new ConnectError("GetFile sent no artifact", Code.Internal);
  return { artifact, data: Buffer.concat(parts) };
}
