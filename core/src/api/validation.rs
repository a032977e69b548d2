//! The CEL rules (`x-kubernetes-validations`) of every training CRD: what v1's webhooks checked,
//! expressed so `kubectl apply` fails at once with a message that names the field.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::{Value, json};

use super::limits::MAX_TOTAL_REPLICAS;
use super::{MULTIKUEUE, TrainingJob};

/// Every generated pod name, `<name>-<type>-<job index>-<pod index>-<5 characters>`, must fit in
/// 63 characters (the JobSet webhook's check). One of the two indexes is always `0`, so
/// `len(name) + len(type) + digits(replicas - 1) <= 63 - 10`.
const NAME_BUDGET: usize = 53;

/// Where a rule sits in the CRD schema.
#[derive(Clone, Debug, PartialEq)]
enum Place {
    /// The object root, the only place `self.metadata.name` can be read.
    Root,
    /// `spec`, optionally reporting errors at a field below it.
    Spec { field_path: Option<String> },
    /// The replica-spec map.
    ReplicaSpecs,
    /// Each replica spec in the map.
    EachReplicaSpec,
    /// A direct child field of `spec`.
    SpecField(String),
}

/// One CEL validation rule and the message the apiserver returns when it fails.
#[derive(Clone, Debug, PartialEq)]
pub struct Rule {
    place: Place,
    rule: String,
    message: String,
}

impl Rule {
    fn new(place: Place, rule: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            place,
            rule: rule.into(),
            message: message.into(),
        }
    }

    /// A rule on the replica-spec map (`self` is the map).
    pub fn on_replica_specs(rule: &str, message: &str) -> Self {
        Self::new(Place::ReplicaSpecs, rule, message)
    }

    /// A rule on `spec` whose errors are reported at `spec.<field>`.
    pub fn on_spec(rule: &str, message: &str, field: &str) -> Self {
        Self::new(
            Place::Spec {
                field_path: Some(format!(".{field}")),
            },
            rule,
            message,
        )
    }

    /// A rule on the direct child `field` of `spec` (`self` is that field).
    pub fn on_field(field: &str, rule: &str, message: &str) -> Self {
        Self::new(Place::SpecField(field.to_owned()), rule, message)
    }

    fn to_json(&self) -> Value {
        let mut value = json!({ "rule": self.rule, "message": self.message });
        if let Place::Spec {
            field_path: Some(path),
        } = &self.place
        {
            value["fieldPath"] = json!(path);
        }
        value
    }
}

/// The rules every kind shares, built from its replica types and default container.
fn common_rules<K: TrainingJob>() -> Vec<Rule> {
    let field = K::REPLICA_SPECS_FIELD;
    let lower_types: Vec<String> = K::REPLICA_TYPES
        .iter()
        .map(|t| format!("'{}'", t.to_ascii_lowercase()))
        .collect();
    let mut rules = vec![
        Rule::new(
            Place::Root,
            "size(self.metadata.name) <= 63 && self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",
            "metadata.name must be a DNS-1035 label: at most 63 lower-case letters, digits and '-', starting with a letter and ending with a letter or digit",
        ),
        Rule::new(
            Place::Root,
            format!(
                "self.spec.{field}.all(k, size(self.metadata.name) + size(k) + \
                 size(string(has(self.spec.{field}[k].replicas) && self.spec.{field}[k].replicas > 1 \
                 ? self.spec.{field}[k].replicas - 1 : 0)) <= {NAME_BUDGET})"
            ),
            "metadata.name is too long: every pod name <name>-<replica type>-<job index>-<pod index>-<5 characters> must fit in 63 characters",
        ),
        Rule::new(
            Place::ReplicaSpecs,
            format!(
                "self.all(k, k.lowerAscii() in [{}])",
                lower_types.join(", ")
            ),
            format!(
                "replica types must be {} (in any case)",
                K::REPLICA_TYPES.join(", ")
            ),
        ),
        Rule::new(
            Place::ReplicaSpecs,
            format!(
                "self.map(k, has(self[k].replicas) ? self[k].replicas : 1).sum() <= {MAX_TOTAL_REPLICAS}"
            ),
            format!("at most {MAX_TOTAL_REPLICAS} replicas in all replica types together"),
        ),
        Rule::new(
            Place::ReplicaSpecs,
            "self.all(k, size(self.filter(j, j.lowerAscii() == k.lowerAscii())) == 1)",
            "each replica type may be given only once, whatever its case",
        ),
        Rule::new(
            Place::EachReplicaSpec,
            "has(self.template) && has(self.template.spec) && size(self.template.spec.containers) > 0",
            "template.spec.containers must hold at least one container",
        ),
        Rule::new(
            Place::EachReplicaSpec,
            "!has(self.template) || !has(self.template.spec) || self.template.spec.containers.all(c, has(c.image) && size(c.image) > 0)",
            "every container in template.spec.containers needs an image",
        ),
        Rule::new(
            Place::Spec {
                field_path: Some(".runPolicy.managedBy".to_owned()),
            },
            "(has(self.runPolicy) && has(self.runPolicy.managedBy)) == (has(oldSelf.runPolicy) && has(oldSelf.runPolicy.managedBy)) && \
             (!has(self.runPolicy) || !has(self.runPolicy.managedBy) || self.runPolicy.managedBy == oldSelf.runPolicy.managedBy)",
            "runPolicy.managedBy is immutable",
        ),
    ];
    rules.push(resize_rule::<K>());
    if K::ELASTIC {
        rules.push(Rule::new(
            Place::SpecField("elasticPolicy".to_owned()),
            "!has(self.minReplicas) || !has(self.maxReplicas) || self.minReplicas <= self.maxReplicas",
            "minReplicas must not exceed maxReplicas",
        ));
    }
    if let Some(container) = K::DEFAULT_CONTAINER {
        rules.push(Rule::new(
            Place::EachReplicaSpec,
            format!(
                "!has(self.template) || !has(self.template.spec) || self.template.spec.containers.exists(c, c.name == '{container}')"
            ),
            format!("template.spec.containers needs a container named {container}"),
        ));
    }
    rules
}

/// A job's replica counts are fixed once it runs (its JobSet is made from them), but for the
/// Worker of an elastic job without a Master (`crate::resize`), which trainset resizes in place
/// between the bounds v1 gives `elasticPolicy`: `minReplicas` and `maxReplicas`, each defaulting
/// to the other, and both to the Worker count. A suspended job may change any count: it takes
/// effect when the job resumes.
fn resize_rule<K: TrainingJob>() -> Rule {
    let field = K::REPLICA_SPECS_FIELD;
    let count =
        |side: &str| format!("(has({side}.{field}[k].replicas) ? {side}.{field}[k].replicas : 1)");
    let (new, old) = (count("self"), count("oldSelf"));
    let elastic = if K::ELASTIC {
        let bound = |name: &str, other: &str| {
            format!(
                "(has(self.elasticPolicy.{name}) ? self.elasticPolicy.{name} : \
                 has(self.elasticPolicy.{other}) ? self.elasticPolicy.{other} : {old})"
            )
        };
        format!(
            " || (k.lowerAscii() == 'worker' && has(self.elasticPolicy) && \
             !self.{field}.exists(j, j.lowerAscii() == 'master') && {new} >= {} && {new} <= {})",
            bound("minReplicas", "maxReplicas"),
            bound("maxReplicas", "minReplicas")
        )
    } else {
        String::new()
    };
    let message = if K::ELASTIC {
        "replicas of a running job change only for the Worker of an elastic job (elasticPolicy) \
         without a Master, between elasticPolicy.minReplicas and elasticPolicy.maxReplicas; \
         suspend the job to change the others"
    } else {
        "replicas of a running job do not change; suspend the job to change them"
    };
    Rule::new(
        Place::Spec {
            field_path: Some(format!(".{field}")),
        },
        format!(
            "(has(oldSelf.runPolicy) && has(oldSelf.runPolicy.suspend) && oldSelf.runPolicy.suspend) || \
             self.{field}.all(k, !(k in oldSelf.{field}) || {new} == {old}{elastic})"
        ),
        message,
    )
}

/// Adds the kind's CEL rules, the replica-spec map bounds, the allowed `managedBy` values and the
/// `runPolicy: {}` default to the CRD generated from the Rust types.
pub fn with_rules<K: TrainingJob>(
    crd: CustomResourceDefinition,
) -> Result<CustomResourceDefinition, serde_json::Error> {
    let mut value = serde_json::to_value(crd)?;
    let field = K::REPLICA_SPECS_FIELD;
    for version in value["spec"]["versions"]
        .as_array_mut()
        .into_iter()
        .flatten()
    {
        let root = &mut version["schema"]["openAPIV3Schema"];
        let spec = &mut root["properties"]["spec"];
        let map = &mut spec["properties"][field];
        map["minProperties"] = json!(1);
        map["maxProperties"] = json!(K::REPLICA_TYPES.len());
        let managers: Vec<&str> = K::MANAGED_HERE
            .iter()
            .copied()
            .chain([MULTIKUEUE])
            .collect();
        spec["properties"]["runPolicy"]["properties"]["managedBy"]["enum"] = json!(managers);
        // A job applied without runPolicy is stored with an empty one, which means the same to
        // trainset; the Kubeflow SDK's models refuse a job whose runPolicy is missing.
        spec["properties"]["runPolicy"]["default"] = json!({});
        for rule in common_rules::<K>().into_iter().chain(K::extra_rules()) {
            let target = match &rule.place {
                Place::Root => &mut *root,
                Place::Spec { .. } => &mut root["properties"]["spec"],
                Place::ReplicaSpecs => &mut root["properties"]["spec"]["properties"][field],
                Place::EachReplicaSpec => {
                    &mut root["properties"]["spec"]["properties"][field]["additionalProperties"]
                }
                Place::SpecField(child) => &mut root["properties"]["spec"]["properties"][child],
            };
            push_rule(target, rule.to_json());
        }
    }
    serde_json::from_value(value)
}

fn push_rule(schema: &mut Value, rule: Value) {
    match schema
        .get_mut("x-kubernetes-validations")
        .and_then(Value::as_array_mut)
    {
        Some(rules) => rules.push(rule),
        None => schema["x-kubernetes-validations"] = json!([rule]),
    }
}
