//! End-to-end tests: the real server on port 0, real Chromium, a real SQLite file, real gRPC.
//! One binary for the whole suite, so it compiles once.

mod actions;
mod auth;
mod cdp;
mod chaos;
mod cli;
mod clients;
mod context;
mod dialogs;
mod egress;
mod emulation;
mod errors;
mod faults;
mod fences;
mod files;
mod forwarding;
mod helpers;
mod image;
mod isolation;
mod lifecycle;
mod live;
mod mcp;
mod ops;
mod proxies;
mod recording;
mod replicas;
mod sdk;
mod sessions;
mod stored;
mod tenants;
mod tls;
mod traces;
mod upstream;
mod workdirs;
