//! No framework policy (or one without env of its own): the trainer runs as the runtime says,
//! with only the TrainJob's own `trainer.env`. Every extension point keeps its default.

use super::policy::MlPolicy;

pub struct Plain;

impl MlPolicy for Plain {}
