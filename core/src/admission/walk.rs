//! One walk of an object through its schema: every field checked against its node, every CEL
//! rule evaluated where it is attached, each error named by its field path.

use cel::Context;
use serde_json::Value;

use super::expressions::{cel_env, sum, to_cel};
use super::schema::{Node, Rule};
use super::{FieldError, MAX_ERRORS};

/// One pass over an object: schema errors at once, CEL rules collected to run afterwards.
#[derive(Default)]
pub(super) struct Walk<'a> {
    pub(super) errors: Vec<FieldError>,
    /// A value of the wrong type or outside its enum; the apiserver then skips every CEL rule.
    pub(super) type_error: bool,
    pub(super) rules: Vec<(&'a Rule, &'a Value, String)>,
}

/// Where a value sits, written both ways the apiserver writes it: schema errors name a map entry
/// `spec.tfReplicaSpecs.Worker`, CEL rule errors `spec.tfReplicaSpecs[Worker]`.
#[derive(Clone, Default)]
pub(super) struct Path {
    pub(super) schema: String,
    pub(super) rule: String,
}

impl Path {
    pub(super) fn field(&self, key: &str) -> Self {
        Self {
            schema: join(&self.schema, key),
            rule: join(&self.rule, key),
        }
    }

    pub(super) fn entry(&self, key: &str) -> Self {
        Self {
            schema: join(&self.schema, key),
            rule: format!("{}[{key}]", self.rule),
        }
    }

    pub(super) fn index(&self, index: usize) -> Self {
        Self {
            schema: format!("{}[{index}]", self.schema),
            rule: format!("{}[{index}]", self.rule),
        }
    }
}

impl<'a> Walk<'a> {
    pub(super) fn error(&mut self, field: &str, message: impl Into<String>) {
        if self.errors.len() < MAX_ERRORS {
            self.errors.push(FieldError {
                field: field.to_owned(),
                message: message.into(),
            });
        }
    }

    pub(super) fn check(&mut self, value: &'a Value, node: &'a Node, path: &Path, root: bool) {
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

    pub(super) fn check_number(&mut self, number: &serde_json::Number, node: &Node, path: &str) {
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

    pub(super) fn check_string(&mut self, text: &str, node: &Node, path: &str) {
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

    pub(super) fn check_array(&mut self, items: &'a [Value], node: &'a Node, path: &Path) {
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

    pub(super) fn check_object(
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
    pub(super) fn evaluate_rules(&mut self) {
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

    pub(super) fn evaluate(&mut self, rule: &Rule, value: &Value, path: &str) {
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

pub(super) fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}
