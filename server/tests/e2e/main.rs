//! End-to-end tests: the real server on port 0, real Chromium, a real SQLite file, real gRPC.
//! One binary for the whole suite, so it compiles once.

mod auth;
mod helpers;
mod lifecycle;
mod sessions;
