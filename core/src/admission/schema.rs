//! The CRD's structural schema as a tree of nodes, each with its type, bounds and CEL rules.

use std::collections::BTreeMap;
use std::sync::Arc;

use cel::{Env, Program};
use regex::Regex;
use serde_json::Value;

use super::BuildError;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Type {
    Object,
    Array,
    String,
    Integer,
    Number,
    Boolean,
}

impl Type {
    pub(super) fn parse(name: &str) -> Option<Self> {
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

    pub(super) fn name(self) -> &'static str {
        match self {
            Self::Object => "object",
            Self::Array => "array",
            Self::String => "string",
            Self::Integer => "integer",
            Self::Number => "number",
            Self::Boolean => "boolean",
        }
    }

    pub(super) fn matches(self, value: &Value) -> bool {
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
pub(super) struct Rule {
    pub(super) program: Program,
    pub(super) message: String,
    /// `fieldPath`: where below the rule's node the apiserver reports its failure.
    pub(super) field_path: String,
}

/// One schema node with its patterns and rules compiled.
#[derive(Default)]
pub(super) struct Node {
    pub(super) type_: Option<Type>,
    pub(super) int_or_string: bool,
    pub(super) preserve_unknown: bool,
    pub(super) properties: BTreeMap<String, Node>,
    pub(super) additional: Option<Box<Node>>,
    pub(super) items: Option<Box<Node>>,
    pub(super) required: Vec<String>,
    pub(super) allowed: Vec<Value>,
    pub(super) minimum: Option<f64>,
    pub(super) maximum: Option<f64>,
    pub(super) min_length: Option<u64>,
    pub(super) max_length: Option<u64>,
    pub(super) pattern: Option<(String, Regex)>,
    pub(super) min_items: Option<u64>,
    pub(super) max_items: Option<u64>,
    pub(super) min_properties: Option<u64>,
    pub(super) max_properties: Option<u64>,
    pub(super) rules: Vec<Rule>,
}

impl Node {
    pub(super) fn build(schema: &Value, crd: &str, env: &Arc<Env>) -> Result<Self, BuildError> {
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
