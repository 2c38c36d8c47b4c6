//! browserpool v1 wire types, generated from `proto/browserpool/v1/*.proto`.
//!
//! Nothing but generated code and two JSON mappings (`google.protobuf.Value`, and the context
//! envelope's, shared by the CLI's files and the server's MCP tools) lives here: domain logic
//! and conversions belong to the crates that own the domain. `tonic` and `prost` are re-exported so dependents use the same versions.

pub mod envelope_json;
pub mod json;

pub use prost;
pub use prost_types;
pub use tonic;

/// Package `browserpool.v1`.
pub mod v1 {
    #![allow(clippy::all, missing_docs)]
    tonic::include_proto!("browserpool.v1");
}

/// The encoded `FileDescriptorSet` of every browserpool .proto, for server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/browserpool_descriptor.bin"));
