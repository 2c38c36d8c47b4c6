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
import { type JsonValue, type MessageInitShape } from "@bufbuild/protobuf";
import { Code, ConnectError, type Client, type Interceptor } from "@connectrpc/connect";
import { Admin } from "../gen/browserpool/v1/admin_pb.js";
import { ArtifactKind, ErrorCode, Record, SessionState, type Action, type ActionResult, type Artifact, type Session } from "../gen/browserpool/v1/common_pb.js";
import { LiveViewMode, Sessions, type AcquireRequestSchema, type LiveViewLink, type ReleaseResponse } from "../gen/browserpool/v1/sessions_pb.js";
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
export declare function bearer(token: string): Interceptor;
/**
 * Connects to `url` (`http://host:port` for plaintext, `https://host:port` for TLS) with a
 * JWT. The connection is made on the first call.
 */
export declare function connect(url: string, token: string, opts?: ConnectOptions): BrowserpoolClient;
/** Per-action options besides name, selector and payload. */
export interface ActOptions {
    /** The action's own deadline in ms; 0 or unset = the server's default (30 s). */
    timeoutMs?: number;
    /** Correlation id, echoed in the result. */
    id?: string;
}
/** Builds an action: name, selector (CSS, text=, role=, xpath=...; may be empty) and a JSON payload (may be omitted). */
export declare function action(name: string, selector?: string, payload?: JsonValue, opts?: ActOptions): Action;
/** A session state as its name: `stateName(r.state) === "CLOSED"`. */
export declare function stateName(state: SessionState): string;
/**
 * An action that ran and failed (`ok=false`): `code` says why (`codeName` its name),
 * `didYouMean` the server's suggestions for a misspelt action or option (also in the message),
 * `result` has the rest.
 */
export declare class ActionError extends Error {
    readonly code: ErrorCode;
    readonly codeName: string;
    readonly didYouMean: string[];
    readonly result: ActionResult;
    constructor(result: ActionResult);
}
/** A leased browser, as {@link withSession} hands it out. */
export declare class LeasedSession {
    readonly client: BrowserpoolClient;
    /** The session as Acquire returned it (id, cdp_url, deadlines...). */
    readonly info: Session;
    constructor(client: BrowserpoolClient, info: Session);
    /** The session id. */
    get id(): string;
    /** Runs one action; rejects with {@link ActionError} when it fails. */
    act(name: string, selector?: string, payload?: JsonValue, opts?: ActOptions): Promise<ActionResult>;
    /** Runs one action and returns its JSON value (`null` when it has none). */
    value(name: string, selector?: string, payload?: JsonValue, opts?: ActOptions): Promise<JsonValue>;
    /** Reads the session again (state, deadlines). */
    get(): Promise<Session>;
    /** Releases the session now (idempotent; {@link withSession} does it anyway). */
    release(): Promise<ReleaseResponse>;
}
/** Acquire's fields (`waitMs`, `ttlMs`, `labels`, `viewport`...), all optional. */
export type AcquireOptions = MessageInitShape<typeof AcquireRequestSchema>;
/**
 * Acquires a browser, runs `fn` with it and releases it when `fn` settles, also when it
 * throws (then `fn`'s error is the one that propagates, even if the release fails too).
 * Returns what `fn` returns.
 */
export declare function withSession<T>(client: BrowserpoolClient, opts: AcquireOptions, fn: (session: LeasedSession) => Promise<T>): Promise<T>;
/**
 * Uploads `data` as file `name` of the session (in 1 MiB messages); a file input takes it with
 * the `set_input_files` action.
 */
export declare function putFile(client: BrowserpoolClient, sessionId: string, name: string, data: Uint8Array): Promise<Artifact>;
/** One file of the session (live, or kept after its end), whole, with its artifact. */
export declare function getFile(client: BrowserpoolClient, sessionId: string, name: string): Promise<{
    artifact: Artifact;
    data: Buffer;
}>;
/** The recording (WebM) of an ended session, whole, with its artifact. */
export declare function getRecording(client: BrowserpoolClient, sessionId: string): Promise<{
    artifact: Artifact;
    data: Buffer;
}>;
/** Deletes what an ended session kept (its files and recording); how many. */
export declare function deleteArtifacts(client: BrowserpoolClient, sessionId: string): Promise<number>;
/** A link to watch the live session in a web browser (`control`: to drive it too), working for `ttlMs` (0: 15 minutes; never past the session's end). */
export declare function liveView(client: BrowserpoolClient, sessionId: string, opts?: {
    control?: boolean;
    ttlMs?: number;
}): Promise<LiveViewLink>;
/** Revokes one live view link of the session (every one when `linkId` is empty); how many. */
export declare function revokeLiveView(client: BrowserpoolClient, sessionId: string, linkId?: string): Promise<number>;
