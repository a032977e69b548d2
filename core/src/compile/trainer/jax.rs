//! `mlPolicy.jax`: `jax.distributed`'s variables and the coordinator port.

use k8s_openapi::api::core::v1::EnvVar;

use super::PORT;
use super::policy::{MlPolicy, Node};
use crate::compile::env;

pub struct Jax;

const RESERVED: &[&str] = &[
    "JAX_NUM_PROCESSES",
    "JAX_PROCESS_ID",
    "JAX_COORDINATOR_ADDRESS",
];

impl MlPolicy for Jax {
    fn reserved(&self) -> &'static [&'static str] {
        RESERVED
    }

    fn port(&self) -> Option<i32> {
        Some(PORT)
    }

    fn env(&self, node: &Node<'_>) -> Vec<EnvVar> {
        vec![
            env::value("JAX_NUM_PROCESSES", node.count.to_string()),
            env::field("JAX_PROCESS_ID", env::COMPLETION_INDEX_PATH),
            env::value(
                "JAX_COORDINATOR_ADDRESS",
                format!("{}:{PORT}", node.first_host()),
            ),
        ]
    }
}
