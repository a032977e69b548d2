//! Every ML policy trainset runs, and which one a runtime asks for.

use super::policy::MlPolicy;
use super::{jax, mpi, plain, torch, xgboost};
use crate::api::trainer::TrainingRuntimeSpec;
use crate::compile::CompileError;

/// The runtime's policy; one Trainer accepts but trainset does not is refused, naming it.
pub fn select(spec: &TrainingRuntimeSpec) -> Result<Box<dyn MlPolicy + '_>, CompileError> {
    let Some(ml) = &spec.ml_policy else {
        return Ok(Box::new(plain::Plain));
    };
    if let Some(source) = &ml.mpi {
        return Ok(Box::new(mpi::Mpi::new(source)?));
    }
    if ml.flux.is_some() {
        return Err(CompileError::invalid(
            "spec.runtimeRef",
            "the runtime's mlPolicy.flux is not supported by trainset yet",
        ));
    }
    Ok(if let Some(source) = &ml.torch {
        Box::new(torch::Torch { source })
    } else if ml.jax.is_some() {
        Box::new(jax::Jax)
    } else if ml.xgboost.is_some() {
        Box::new(xgboost::XGBoost)
    } else {
        Box::new(plain::Plain)
    })
}
