//! The CEL environment the rules run in: the `cel` crate plus the Kubernetes functions the
//! rules use, and JSON values as CEL values.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use cel::extractors::This;
use cel::{Env, ExecutionError};
use serde_json::Value;

use super::MAX_CEL_DEPTH;

/// CEL as the apiserver offers it to CRD rules, as far as trainset's rules use it: the standard
/// library, the strings extension (`lowerAscii`) and Kubernetes' list `sum()`.
/// Built once per process: every rule compiles and runs against the same environment.
pub(super) fn cel_env() -> Arc<Env> {
    static ENV: OnceLock<Arc<Env>> = OnceLock::new();
    ENV.get_or_init(|| {
        let mut env = Env::stdlib();
        // Registering a built-in extension on a fresh environment cannot clash.
        let _ = env.add_extension(cel::extensions::strings);
        Arc::new(env)
    })
    .clone()
}

/// Kubernetes' `<list>.sum()` over integers; overflow is an error, as in Kubernetes.
pub(super) fn sum(This(list): This<Arc<Vec<cel::Value>>>) -> Result<i64, ExecutionError> {
    list.iter().try_fold(0i64, |total, item| match item {
        cel::Value::Int(n) => total
            .checked_add(*n)
            .ok_or_else(|| ExecutionError::function_error("sum", "integer overflow")),
        other => Err(ExecutionError::function_error(
            "sum",
            format!("expects integers, got {other:?}"),
        )),
    })
}

/// JSON as CEL sees an object in Kubernetes: integers are `int`, other numbers `double`.
pub(super) fn to_cel(value: &Value, depth: usize) -> cel::Value {
    if depth > MAX_CEL_DEPTH {
        return cel::Value::Null;
    }
    match value {
        Value::Null => cel::Value::Null,
        Value::Bool(b) => cel::Value::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => cel::Value::Int(i),
            (None, Some(u)) => cel::Value::UInt(u),
            _ => cel::Value::Float(n.as_f64().unwrap_or_default()),
        },
        Value::String(s) => cel::Value::String(Arc::new(s.clone())),
        Value::Array(items) => cel::Value::List(Arc::new(
            items.iter().map(|v| to_cel(v, depth + 1)).collect(),
        )),
        Value::Object(map) => {
            let entries: HashMap<String, cel::Value> = map
                .iter()
                .map(|(k, v)| (k.clone(), to_cel(v, depth + 1)))
                .collect();
            cel::Value::from(entries)
        }
    }
}
