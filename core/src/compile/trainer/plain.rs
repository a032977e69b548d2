//! No framework policy (or one without env of its own): the trainer runs as the runtime says,
//! with only the TrainJob's own `trainer.env`.

use k8s_openapi::api::core::v1::EnvVar;

use super::{MlPolicy, Node};

pub struct Plain;

impl MlPolicy for Plain {
    fn reserved(&self) -> &'static [&'static str] {
        &[]
    }

    fn port(&self) -> Option<i32> {
        None
    }

    fn env(&self, _: &Node<'_>) -> Vec<EnvVar> {
        Vec::new()
    }
}
