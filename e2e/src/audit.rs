//! The local apiserver's audit log: `e2e/cluster` records every request of trainset's
//! ServiceAccount and of the peer operators, at the Metadata level (who, what, from where, when).

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::path::PathBuf;

use k8s_openapi::jiff::Timestamp;
use serde_json::Value;

use crate::cluster_state;

fn path() -> PathBuf {
    std::env::var_os("TRAINSET_E2E_AUDIT_LOG")
        .map_or_else(|| cluster_state().join("audit.log"), Into::into)
}

/// A place in the audit log, and the moment it was taken; [`Audit::since`] reads the requests
/// received after it.
pub struct Audit {
    offset: u64,
    at: Timestamp,
}

impl Audit {
    pub fn mark() -> Self {
        Audit {
            offset: std::fs::metadata(path()).map_or(0, |m| m.len()),
            at: Timestamp::now(),
        }
    }

    /// Every request received since the mark, once each. A watch is logged when it starts and
    /// when it ends: the first is kept, and a watch opened before the mark that ends after it is
    /// not one of these requests.
    pub fn since(&self) -> Vec<Value> {
        let Ok(mut file) = std::fs::File::open(path()) else {
            return Vec::new();
        };
        // A log rotated meanwhile is read from its start.
        let from = if file.metadata().map_or(0, |m| m.len()) >= self.offset {
            self.offset
        } else {
            0
        };
        if file.seek(SeekFrom::Start(from)).is_err() {
            return Vec::new();
        }
        let mut seen = HashSet::new();
        BufReader::new(file)
            .lines()
            .map_while(Result::ok)
            .filter_map(|line| serde_json::from_str::<Value>(&line).ok())
            .filter(|event| received(event).is_some_and(|at| at >= self.at))
            .filter(|event| seen.insert(event["auditID"].as_str().unwrap_or_default().to_owned()))
            .collect()
    }
}

/// When the apiserver received the request an audit event is about.
pub fn received(event: &Value) -> Option<Timestamp> {
    event["requestReceivedTimestamp"].as_str()?.parse().ok()
}
