// TLS run of the TypeScript client against a live server with mutual TLS (driven by
// server/tests/e2e/clients.rs, which checks the JSON line this prints).
// Env: SERVER (https://host:port), TOKEN, CA_FILE (the CA of the server's certificate),
// CERT_FILE and KEY_FILE (a client certificate that CA signed).

import { Code, ConnectError, connect } from "../dist/index.js";

const { SERVER, TOKEN, CA_FILE, CERT_FILE, KEY_FILE } = process.env;
const out = {};

// The CA file and the client identity: the call goes through (List needs no browser).
const client = connect(SERVER, TOKEN, { caFile: CA_FILE, certFile: CERT_FILE, keyFile: KEY_FILE });
const listed = await client.sessions.list({}, { timeoutMs: 30_000 });
out.with_identity = { sessions: listed.sessions.length };
client.close();

// The CA file alone: the server refuses the handshake, the call rejects with a ConnectError.
const anonymous = connect(SERVER, TOKEN, { caFile: CA_FILE });
try {
  await anonymous.sessions.get({ sessionId: "s-none" }, { timeoutMs: 30_000 });
  out.without_identity = "answered?!";
} catch (e) {
  if (!(e instanceof ConnectError)) throw e;
  out.without_identity = Code[e.code];
  out.without_identity_message = e.rawMessage;
}
anonymous.close();

console.log(JSON.stringify(out));
