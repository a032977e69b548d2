//! `mlPolicy.xgboost`: the Rabit tracker's `DMLC_*` variables and port; one worker per GPU.

use k8s_openapi::api::core::v1::EnvVar;

use super::PORT;
use super::policy::{MlPolicy, Node};
use crate::compile::env;

pub struct XGBoost;

const RESERVED: &[&str] = &[
    "DMLC_TRACKER_URI",
    "DMLC_TRACKER_PORT",
    "DMLC_TASK_ID",
    "DMLC_NUM_WORKER",
];

impl MlPolicy for XGBoost {
    fn reserved(&self) -> &'static [&'static str] {
        RESERVED
    }

    fn port(&self) -> Option<i32> {
        Some(PORT)
    }

    fn env(&self, node: &Node<'_>) -> Vec<EnvVar> {
        let workers = i64::from(node.count).saturating_mul(node.gpus.max(1));
        vec![
            env::value("DMLC_TRACKER_URI", node.first_host()),
            env::value("DMLC_TRACKER_PORT", PORT.to_string()),
            env::field("DMLC_TASK_ID", env::COMPLETION_INDEX_PATH),
            env::value("DMLC_NUM_WORKER", workers.to_string()),
        ]
    }
}
