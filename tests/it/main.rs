//! trainset's integration tests, one binary with a module per area of the source: the API types
//! and CRDs, offline admission, `render`, the v1 family's compiler and status, the Trainer
//! family's, properties and a fuzzer over both, and the import graph.

mod api;
mod crds;
mod fuzz;
mod imports;
mod invalid;
mod properties;
mod render;
mod support;
mod trainer;
mod v1;
