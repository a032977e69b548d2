//! Shared by the compiler's tests: a fixed SSH key and compiling with it.

use trainset::compile::gang::GangScheduler;
use trainset::compile::{CompileError, Compiled, Options, SshKeyPair};
use trainset::kinds::compile_manifest;

/// A fixed key so compiled MPIJobs are stable; real runs generate one.
pub fn test_key() -> SshKeyPair {
    SshKeyPair {
        private_key: "test-private-key\n".into(),
        public_key: "ecdsa-sha2-nistp521 test-public-key".into(),
    }
}

/// Compiles with [`test_key`], `namespace` for jobs that name none, and no cluster domain.
pub fn compile_with_test_key(
    manifest: &serde_json::Value,
    namespace: Option<&str>,
) -> Result<Compiled, CompileError> {
    compile_with_gang(manifest, namespace, None)
}

/// Compiles `manifest` with v1 jobs placed by `gang_scheduler`.
pub fn compile_with_gang(
    manifest: &serde_json::Value,
    namespace: Option<&str>,
    gang_scheduler: Option<&GangScheduler>,
) -> Result<Compiled, CompileError> {
    let key = test_key();
    let options = Options {
        default_namespace: namespace,
        ssh_key: Some(&key),
        cluster_domain: None,
        gang_scheduler,
    };
    compile_manifest(manifest.clone(), &options)
}

mod job;
pub use job::Job;
