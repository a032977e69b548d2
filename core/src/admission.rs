//! What the apiserver checks when a training job is created, done offline from the very CRDs
//! trainset installs (`crate::crds`): the structural schema (types, required fields, enums,
//! bounds, patterns, lengths, unknown fields) and every CEL rule, evaluated with the `cel` crate
//! plus the Kubernetes CEL functions the rules use. `trainset render` and the controller both
//! run it, so each validation rule is written once, in the CRD, and enforced the same way by the
//! apiserver and by trainset.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use cel::extractors::This;
use cel::{Context, Env, ExecutionError, Program};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use regex::Regex;
use serde_json::Value;

use crate::crds;

/// At most this many errors are reported for one object, as the apiserver caps its list too.
const MAX_ERRORS: usize = 20;
/// Values nested deeper than this are not handed to CEL (no rule reads that deep); it bounds the
/// recursion on input that only the schema walk has seen.
const MAX_CEL_DEPTH: usize = 64;

/// One reason an object is refused: the field at fault, written as the apiserver writes it
/// (`spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].image`), and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.field, self.message)
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum AdmissionError {
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Invalid(Vec<FieldError>),
    #[error(
        "apiVersion/kind: {api_version}/{kind} is not a training kind trainset serves ({})",
        crate::kinds::served()
    )]
    NotServed { api_version: String, kind: String },
    #[error("building the validators from the CRDs: {0}")]
    Crds(String),
}

/// Checks `object` as the apiserver would on create, with strict field validation (what
/// `kubectl apply` asks for): every error, up to [`MAX_ERRORS`].
pub fn admit(object: &Value) -> Result<(), AdmissionError> {
    let api_version = object["apiVersion"].as_str().unwrap_or_default();
    let kind = object["kind"].as_str().unwrap_or_default();
    let not_served = || AdmissionError::NotServed {
        api_version: api_version.to_owned(),
        kind: kind.to_owned(),
    };
    let schemas = validator(kind)
        .ok_or_else(not_served)?
        .map_err(AdmissionError::Crds)?;
    let schema = schemas.get(api_version).ok_or_else(not_served)?;
    let mut walk = Walk::default();
    walk.check(object, schema, &Path::default(), true);
    walk.evaluate_rules();
    if walk.errors.is_empty() {
        Ok(())
    } else {
        Err(AdmissionError::Invalid(walk.errors))
    }
}

/// A kind's schema per served apiVersion.
type Schemas = HashMap<String, Node>;

/// The kind's schemas, built from its CRD on first use and kept for the process; `None` when
/// trainset does not serve the kind.
fn validator(kind: &str) -> Option<Result<Arc<Schemas>, String>> {
    static BUILT: OnceLock<Mutex<HashMap<String, Arc<Schemas>>>> = OnceLock::new();
    let built = BUILT.get_or_init(Default::default);
    if let Some(schemas) = built
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(kind)
    {
        return Some(Ok(schemas.clone()));
    }
    let crd = match crds::of_kind(kind)? {
        Ok(crd) => crd,
        Err(error) => return Some(Err(error.to_string())),
    };
    let schemas = match schemas(&crd) {
        Ok(schemas) => Arc::new(schemas),
        Err(error) => return Some(Err(error.to_string())),
    };
    built
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(kind.to_owned(), schemas.clone());
    Some(Ok(schemas))
}

#[derive(Debug, thiserror::Error)]
enum BuildError {
    #[error("{crd}: {source}")]
    Json {
        crd: String,
        source: serde_json::Error,
    },
    #[error("{crd}: pattern {pattern:?}: {source}")]
    Pattern {
        crd: String,
        pattern: String,
        source: Box<regex::Error>,
    },
    #[error("{crd}: rule {rule:?}: {message}")]
    Rule {
        crd: String,
        rule: String,
        message: String,
    },
}

fn schemas(crd: &CustomResourceDefinition) -> Result<Schemas, BuildError> {
    let env = cel_env();
    let name = crd.metadata.name.clone().unwrap_or_default();
    let mut schemas = HashMap::new();
    for version in &crd.spec.versions {
        let Some(schema) = version
            .schema
            .as_ref()
            .and_then(|s| s.open_api_v3_schema.as_ref())
        else {
            continue;
        };
        let schema = serde_json::to_value(schema).map_err(|source| BuildError::Json {
            crd: name.clone(),
            source,
        })?;
        let api_version = format!("{}/{}", crd.spec.group, version.name);
        schemas.insert(api_version, Node::build(&schema, &name, &env)?);
    }
    Ok(schemas)
}

/// CEL as the apiserver offers it to CRD rules, as far as trainset's rules use it: the standard
/// library, the strings extension (`lowerAscii`) and Kubernetes' list `sum()`.
/// Built once per process: every rule compiles and runs against the same environment.
fn cel_env() -> Arc<Env> {
    static ENV: OnceLock<Arc<Env>> = OnceLock::new();
    ENV.get_or_init(|| {
        let mut env = Env::stdlib();
        // Registering a built-in extension on a fresh environment cannot clash.
        let _ = env.add_extension(cel::extensions::strings);
        Arc::new(env)
    })
    .clone()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Type {
    Object,
    Array,
    String,
    Integer,
    Number,
    Boolean,
}

impl Type {
    fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "object" => Self::Object,
            "array" => Self::Array,
            "string" => Self::String,
            "integer" => Self::Integer,
            "number" => Self::Number,
            "boolean" => Self::Boolean,
            _ => return None,
        })
    }

    fn name(self) -> &'static str {
        match self {
            Self::Object => "object",
            Self::Array => "array",
            Self::String => "string",
            Self::Integer => "integer",
            Self::Number => "number",
            Self::Boolean => "boolean",
        }
    }

    fn matches(self, value: &Value) -> bool {
        match self {
            Self::Object => value.is_object(),
            Self::Array => value.is_array(),
            Self::String => value.is_string(),
            Self::Integer => value.is_i64() || value.is_u64(),
            Self::Number => value.is_number(),
            Self::Boolean => value.is_boolean(),
        }
    }
}

/// A CEL rule compiled once.
struct Rule {
    program: Program,
    message: String,
    /// `fieldPath`: where below the rule's node the apiserver reports its failure.
    field_path: String,
}

/// One schema node with its patterns and rules compiled.
#[derive(Default)]
struct Node {
    type_: Option<Type>,
    int_or_string: bool,
    preserve_unknown: bool,
    properties: BTreeMap<String, Node>,
    additional: Option<Box<Node>>,
    items: Option<Box<Node>>,
    required: Vec<String>,
    allowed: Vec<Value>,
    minimum: Option<f64>,
    maximum: Option<f64>,
    min_length: Option<u64>,
    max_length: Option<u64>,
    pattern: Option<(String, Regex)>,
    min_items: Option<u64>,
    max_items: Option<u64>,
    min_properties: Option<u64>,
    max_properties: Option<u64>,
    rules: Vec<Rule>,
}

impl Node {
    fn build(schema: &Value, crd: &str, env: &Arc<Env>) -> Result<Self, BuildError> {
        let number = |key: &str| schema[key].as_f64();
        let count = |key: &str| schema[key].as_u64();
        let child = |key: &str| -> Result<Option<Box<Node>>, BuildError> {
            match &schema[key] {
                Value::Object(_) => Ok(Some(Box::new(Node::build(&schema[key], crd, env)?))),
                _ => Ok(None),
            }
        };
        let mut properties = BTreeMap::new();
        if let Some(map) = schema["properties"].as_object() {
            for (name, property) in map {
                properties.insert(name.clone(), Node::build(property, crd, env)?);
            }
        }
        let pattern = match schema["pattern"].as_str() {
            Some(pattern) => Some((
                pattern.to_owned(),
                Regex::new(pattern).map_err(|source| BuildError::Pattern {
                    crd: crd.to_owned(),
                    pattern: pattern.to_owned(),
                    source: Box::new(source),
                })?,
            )),
            None => None,
        };
        let mut rules = Vec::new();
        for rule in schema["x-kubernetes-validations"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let text = rule["rule"].as_str().unwrap_or_default();
            // Transition rules compare with the stored object; a create has none.
            if text.contains("oldSelf") {
                continue;
            }
            let program = env.compile(text).map_err(|e| BuildError::Rule {
                crd: crd.to_owned(),
                rule: text.to_owned(),
                message: e.to_string(),
            })?;
            rules.push(Rule {
                program,
                message: rule["message"].as_str().unwrap_or(text).to_owned(),
                field_path: rule["fieldPath"].as_str().unwrap_or_default().to_owned(),
            });
        }
        Ok(Self {
            type_: schema["type"].as_str().and_then(Type::parse),
            int_or_string: schema["x-kubernetes-int-or-string"] == true,
            preserve_unknown: schema["x-kubernetes-preserve-unknown-fields"] == true,
            properties,
            additional: child("additionalProperties")?,
            items: child("items")?,
            required: schema["required"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|r| r.as_str().map(str::to_owned))
                .collect(),
            allowed: schema["enum"].as_array().cloned().unwrap_or_default(),
            minimum: number("minimum"),
            maximum: number("maximum"),
            min_length: count("minLength"),
            max_length: count("maxLength"),
            pattern,
            min_items: count("minItems"),
            max_items: count("maxItems"),
            min_properties: count("minProperties"),
            max_properties: count("maxProperties"),
            rules,
        })
    }
}

/// One pass over an object: schema errors at once, CEL rules collected to run afterwards.
#[derive(Default)]
struct Walk<'a> {
    errors: Vec<FieldError>,
    /// A value of the wrong type or outside its enum; the apiserver then skips every CEL rule.
    type_error: bool,
    rules: Vec<(&'a Rule, &'a Value, String)>,
}

/// Where a value sits, written both ways the apiserver writes it: schema errors name a map entry
/// `spec.tfReplicaSpecs.Worker`, CEL rule errors `spec.tfReplicaSpecs[Worker]`.
#[derive(Clone, Default)]
struct Path {
    schema: String,
    rule: String,
}

impl Path {
    fn field(&self, key: &str) -> Self {
        Self {
            schema: join(&self.schema, key),
            rule: join(&self.rule, key),
        }
    }

    fn entry(&self, key: &str) -> Self {
        Self {
            schema: join(&self.schema, key),
            rule: format!("{}[{key}]", self.rule),
        }
    }

    fn index(&self, index: usize) -> Self {
        Self {
            schema: format!("{}[{index}]", self.schema),
            rule: format!("{}[{index}]", self.rule),
        }
    }
}

impl<'a> Walk<'a> {
    fn error(&mut self, field: &str, message: impl Into<String>) {
        if self.errors.len() < MAX_ERRORS {
            self.errors.push(FieldError {
                field: field.to_owned(),
                message: message.into(),
            });
        }
    }

    fn check(&mut self, value: &'a Value, node: &'a Node, path: &Path, root: bool) {
        // A null is either allowed (nullable) or dropped by the apiserver before validation.
        if value.is_null() {
            return;
        }
        if node.int_or_string {
            if !(value.is_string() || value.is_i64() || value.is_u64()) {
                self.error(&path.schema, "must be an integer or a string");
                self.type_error = true;
                return;
            }
        } else if let Some(type_) = node.type_
            && !type_.matches(value)
        {
            self.error(&path.schema, format!("must be of type {}", type_.name()));
            self.type_error = true;
            return;
        }
        if !node.allowed.is_empty() && !node.allowed.contains(value) {
            // Like a wrong type, an unsupported value keeps the apiserver from running CEL.
            self.type_error = true;
            let allowed: Vec<String> = node.allowed.iter().map(Value::to_string).collect();
            self.error(
                &path.schema,
                format!(
                    "Unsupported value: {value}: supported values: {}",
                    allowed.join(", ")
                ),
            );
        }
        match value {
            Value::Number(number) => self.check_number(number, node, &path.schema),
            Value::String(text) => self.check_string(text, node, &path.schema),
            Value::Array(items) => self.check_array(items, node, path),
            Value::Object(map) => self.check_object(map, node, path, root),
            Value::Bool(_) | Value::Null => {}
        }
        for rule in &node.rules {
            self.rules.push((rule, value, path.rule.clone()));
        }
    }

    fn check_number(&mut self, number: &serde_json::Number, node: &Node, path: &str) {
        let Some(value) = number.as_f64() else { return };
        if let Some(minimum) = node.minimum.filter(|m| value < *m) {
            self.error(
                path,
                format!("Invalid value: {number}: should be greater than or equal to {minimum}"),
            );
        }
        if let Some(maximum) = node.maximum.filter(|m| value > *m) {
            self.error(
                path,
                format!("Invalid value: {number}: should be less than or equal to {maximum}"),
            );
        }
    }

    fn check_string(&mut self, text: &str, node: &Node, path: &str) {
        let length = text.chars().count() as u64;
        if let Some(max) = node.max_length.filter(|m| length > *m) {
            self.error(path, format!("Too long: may not be more than {max} bytes"));
        }
        if let Some(min) = node.min_length.filter(|m| length < *m) {
            self.error(path, format!("should be at least {min} chars long"));
        }
        if let Some((pattern, regex)) = &node.pattern
            && !regex.is_match(text)
        {
            self.error(path, format!("should match '{pattern}'"));
        }
    }

    fn check_array(&mut self, items: &'a [Value], node: &'a Node, path: &Path) {
        let count = items.len() as u64;
        if let Some(max) = node.max_items.filter(|m| count > *m) {
            self.error(
                &path.schema,
                format!("Too many: {count}: must have at most {max} items"),
            );
        }
        if let Some(min) = node.min_items.filter(|m| count < *m) {
            self.error(&path.schema, format!("should have at least {min} items"));
        }
        if let Some(item) = &node.items {
            for (index, value) in items.iter().enumerate() {
                self.check(value, item, &path.index(index), false);
            }
        }
    }

    fn check_object(
        &mut self,
        map: &'a serde_json::Map<String, Value>,
        node: &'a Node,
        path: &Path,
        root: bool,
    ) {
        let count = map.len() as u64;
        if let Some(max) = node.max_properties.filter(|m| count > *m) {
            self.error(
                &path.schema,
                format!("should have at most {max} properties"),
            );
        }
        if let Some(min) = node.min_properties.filter(|m| count < *m) {
            self.error(
                &path.schema,
                format!("should have at least {min} properties"),
            );
        }
        for required in &node.required {
            if map.get(required).is_none_or(Value::is_null) {
                self.error(&path.field(required).schema, "Required value");
            }
        }
        for (key, value) in map {
            // The apiserver checks these itself, not through the CRD schema.
            if root && matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
                continue;
            }
            if let Some(property) = node.properties.get(key) {
                self.check(value, property, &path.field(key), false);
            } else if let Some(additional) = &node.additional {
                self.check(value, additional, &path.entry(key), false);
            } else if !node.preserve_unknown {
                self.error("", format!("unknown field \"{}\"", path.field(key).schema));
            }
        }
    }

    /// Runs the collected CEL rules, unless a value had the wrong type: the apiserver then
    /// reports only that.
    fn evaluate_rules(&mut self) {
        if self.type_error {
            self.error(
                "",
                "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation",
            );
            return;
        }
        for (rule, value, path) in std::mem::take(&mut self.rules) {
            self.evaluate(rule, value, &path);
        }
    }

    fn evaluate(&mut self, rule: &Rule, value: &Value, path: &str) {
        let at = format!("{path}{}", rule.field_path);
        let mut context = Context::with_env(cel_env());
        if context.add_function("sum", sum).is_err() {
            self.error(&at, "cannot register sum() for CEL");
            return;
        }
        context.add_variable_from_value("self", to_cel(value, 0));
        match rule.program.execute(&context) {
            Ok(cel::Value::Bool(true)) => {}
            Ok(_) => self.error(&at, rule.message.clone()),
            Err(error) => self.error(
                &at,
                format!("{}: the rule could not be evaluated: {error}", rule.message),
            ),
        }
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

/// Kubernetes' `<list>.sum()` over integers; overflow is an error, as in Kubernetes.
fn sum(This(list): This<Arc<Vec<cel::Value>>>) -> Result<i64, ExecutionError> {
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
fn to_cel(value: &Value, depth: usize) -> cel::Value {
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
