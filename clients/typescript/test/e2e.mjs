// End-to-end run of the TypeScript client against a live server (driven by
// server/tests/e2e/clients.rs, which checks the JSON line this prints).
// Env: SERVER (http://host:port), TOKEN (sessions:read and sessions:write), SITE (the fixture
// site's base URL). Needs `npm ci` in clients/typescript.

import {
  ActionError,
  action,
  Code,
  ConnectError,
  ErrorCode,
  Record,
  SessionState,
  connect,
  getFile,
  getRecording,
  liveView,
  LiveViewMode,
  revokeLiveView,
  putFile,
  stateName,
  withSession,
} from "../dist/index.js";

const { SERVER, TOKEN, SITE } = process.env;
const PNG = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
const out = {};

const client = connect(SERVER, TOKEN);
// The whole flow: navigate, interact, read, screenshot; released when the callback settles.
await withSession(client, { waitMs: 30_000, labels: { client: "typescript" }, record: Record.ON }, async (s) => {
  out.session = s.id;
  out.uploaded_sha256 = (await putFile(client, s.id, "hello.txt", Buffer.from("hi there"))).sha256;
  const link = await liveView(client, s.id, { control: true, ttlMs: 60_000 });
  out.live = [link.url.split("/live/")[1].split("/")[0], LiveViewMode[link.mode]];
  out.live_revoked = await revokeLiveView(client, s.id, link.linkId);
  await s.act("navigate", "", `${SITE}/`);
  out.title = await s.value("title");
  out.heading_before = await s.value("extract", "h1");
  await s.act("fill", "#name", "typescript");
  await s.act("click", "#go");
  out.heading = await s.value("extract", "#greeting");
  out.evaluated = await s.value("evaluate", "", "({n: 1 + 1, list: [true, 'x', null], half: 0.5})");
  const shot = await s.act("screenshot");
  out.png = Buffer.from(shot.data.subarray(0, 8)).equals(PNG);
  out.mime = shot.mimeType;
  out.png_bytes = shot.data.length;
  // An action that fails rejects with ActionError and its code; the session lives on.
  try {
    await s.act("click", "#missing", undefined, { timeoutMs: 500 });
  } catch (e) {
    if (!(e instanceof ActionError)) throw e;
    out.action_error = ErrorCode[e.code];
  }
  // A misspelt action: the error carries the server's suggestion.
  try {
    await s.act("navigat", "", `${SITE}/`);
  } catch (e) {
    if (!(e instanceof ActionError)) throw e;
    out.did_you_mean = [e.didYouMean, e.message.includes("did you mean: navigate"), e.codeName];
  }
  // A wrong argument type from JavaScript is named by its field.
  try {
    action("click", "#go", undefined, { timeoutMs: "500" });
  } catch (e) {
    out.type_error = e instanceof TypeError ? e.message : String(e);
  }
  out.state_inside = SessionState[(await s.get()).state];
});
out.released_state = stateName((await client.sessions.release({ sessionId: out.session })).state);
out.state_after = SessionState[(await client.sessions.get({ sessionId: out.session })).state];
// Kept after the end: the upload and the recording.
const kept = await getFile(client, out.session, "hello.txt");
[out.kept_file, out.kept_sha256] = [kept.data.toString(), kept.artifact.sha256];
const video = await getRecording(client, out.session);
out.recording = [
  video.artifact.name,
  video.artifact.mimeType,
  video.data.subarray(0, 4).equals(Buffer.from([0x1a, 0x45, 0xdf, 0xa3])),
  BigInt(video.data.length) === video.artifact.size,
];

// A throwing callback still releases the session, and its error is the one that propagates.
try {
  await withSession(client, { waitMs: 30_000 }, async (s) => {
    out.raised_session = s.id;
    throw new Error("boom");
  });
} catch (e) {
  out.raised = e.message;
}
out.raised_state_after = SessionState[(await client.sessions.get({ sessionId: out.raised_session })).state];
client.close();

// A bad token: the server refuses the call, withSession rejects with the status code.
const bad = connect(SERVER, "not-a-token");
try {
  await withSession(bad, { waitMs: 1_000 }, async () => {
    out.bad_token = "acquired?!";
  });
} catch (e) {
  if (!(e instanceof ConnectError)) throw e;
  out.bad_token = Code[e.code];
  out.bad_token_is_status = e.code === Code.Unauthenticated;
}
bad.close();

console.log(JSON.stringify(out));
