//! What trainset's MutatingAdmissionPolicies share (`admissionregistration.k8s.io/v1`,
//! Kubernetes 1.36+): the API that serves them, their kinds, and whether one is installed, as
//! the startup log says it. Each policy's own rules are in its module: `crate::pod_labels` and
//! `crate::api_version`.

/// The API that serves the policies.
pub const POLICY_API: &str = "admissionregistration.k8s.io/v1";
/// A policy and its binding: (kind, plural).
pub const POLICY: (&str, &str) = ("MutatingAdmissionPolicy", "mutatingadmissionpolicies");
pub const BINDING: (&str, &str) = (
    "MutatingAdmissionPolicyBinding",
    "mutatingadmissionpolicybindings",
);

#[derive(Debug, thiserror::Error)]
#[error("writing an admission policy as YAML: {0}")]
pub struct PolicyYamlError(#[from] serde_norway::Error);

/// The binding of policy `name`, of the same name, for every object the policy matches.
pub fn binding(name: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": POLICY_API,
        "kind": BINDING.0,
        "metadata": {"name": name},
        "spec": {"policyName": name},
    })
}

/// `objects` as one YAML stream after the comment `header`, as committed under `deploy/`.
pub fn yaml_stream(header: &str, objects: &[serde_json::Value]) -> Result<String, PolicyYamlError> {
    let mut out = String::from(header);
    for object in objects {
        out.push_str("---\n");
        out.push_str(&serde_norway::to_string(object)?);
    }
    Ok(out)
}

/// A policy trainset ships: its name (also its binding's), the file it is committed as, what
/// it gives, and what is lost without it.
#[derive(Clone, Copy, Debug)]
pub struct Shipped {
    pub name: &'static str,
    pub file: &'static str,
    pub feature: &'static str,
    pub without: &'static str,
}

/// Whether a shipped policy is in force on this cluster, as found at startup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Support {
    /// The policy and its binding are installed.
    Installed,
    /// The apiserver serves the policy API, but the policy or its binding is missing.
    NotInstalled { missing: &'static str },
    /// The apiserver does not serve `admissionregistration.k8s.io/v1` MutatingAdmissionPolicy
    /// (Kubernetes before 1.36, or the API turned off).
    ApiMissing,
    /// The lookup failed (e.g. RBAC); nothing is known.
    Unknown(String),
}

impl Support {
    pub fn active(&self) -> bool {
        *self == Self::Installed
    }

    /// One line for the startup log.
    pub fn message(&self, policy: &Shipped) -> String {
        let Shipped {
            name,
            file,
            feature,
            without,
        } = policy;
        match self {
            Self::Installed => {
                format!(
                    "{feature} on: {} {name} and its binding are installed",
                    POLICY.0
                )
            }
            Self::NotInstalled { missing } => format!(
                "{feature} off: {missing} {name} is not installed \
                 (kubectl apply --server-side -f {file}); {without}"
            ),
            Self::ApiMissing => format!(
                "{feature} off: this cluster does not serve {POLICY_API} {} (Kubernetes 1.36+); \
                 {without}",
                POLICY.0
            ),
            Self::Unknown(error) => format!("{feature} unknown: cannot read {name}: {error}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_installed_policy_counts_as_active_and_each_message_names_it() {
        let policy = Shipped {
            name: "trainset-example",
            file: "deploy/example.yaml",
            feature: "examples",
            without: "nothing is an example",
        };
        assert!(Support::Installed.active());
        assert!(
            Support::Installed
                .message(&policy)
                .starts_with("examples on: ")
        );
        for off in [
            Support::NotInstalled { missing: "binding" },
            Support::ApiMissing,
            Support::Unknown("forbidden".into()),
        ] {
            assert!(!off.active());
            let message = off.message(&policy);
            assert!(
                message.contains(policy.name) || message.contains(POLICY_API),
                "{message}"
            );
        }
        let missing = Support::NotInstalled { missing: "binding" }.message(&policy);
        assert!(missing.contains("deploy/example.yaml") && missing.ends_with(policy.without));
    }
}
