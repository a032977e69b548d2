//! Fuzzing the pure core: every example manifest mutated at random (types swapped, extreme
//! numbers, long strings, deep values, unknown and duplicate replica types), then admission,
//! compile (straight, without admission, so compile's own guards are what keeps it bounded) and
//! status derivation over random JobSet and Job states. Nothing may panic or abort, the same input
//! must give the same output, and the process's peak memory stays bounded.
//!
//! CI runs `TRAINSET_FUZZ_CASES` cases (default 3,000) from a fixed seed. The long run:
//! `TRAINSET_FUZZ_CASES=1000000 cargo test --release --test it fuzz -- --nocapture`
//! (`TRAINSET_FUZZ_SEED` picks another sequence); a failure prints the seed that reproduces it.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::time::Instant;

use jobset_types::JobSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use serde_json::{Map, Value, json};
use trainset::admission;
use trainset::status::{self, Observed, Subject};

use crate::support as common;

/// Peak resident memory the whole run may reach.
const MAX_PEAK_RSS_KIB: u64 = 1 << 20;

/// splitmix64: small, fast and reproducible from a seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn chance(&mut self, one_in: usize) -> bool {
        self.below(one_in) == 0
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

const NUMBERS: &[i64] = &[
    0,
    1,
    -1,
    2,
    63,
    10_000,
    10_001,
    20_001,
    65_536,
    2_000_000_000,
    i32::MAX as i64,
    i32::MIN as i64,
    i64::MAX,
    i64::MIN,
];
const WORDS: &[&str] = &[
    "Worker",
    "worker",
    "WORKER",
    "Master",
    "Chief",
    "PS",
    "ps",
    "Evaluator",
    "Launcher",
    "Unknown",
    "",
    "auto",
    "gpu",
    "cpu",
    "0",
    "007",
    "1024",
    "99999",
    "OnFailure",
    "Never",
    "ExitCode",
    "Always",
    "None",
    "All",
    "OpenMPI",
    "Intel",
    "MPICH",
    "/root/.ssh",
    "relative",
    "-",
    "9lives",
];

/// A random value: scalars of every JSON type, long strings, deep nesting.
fn random_value(rng: &mut Rng, depth: usize) -> Value {
    match rng.below(if depth > 3 { 7 } else { 10 }) {
        0 => Value::Null,
        1 => json!(rng.chance(2)),
        2 => json!(*rng.pick(NUMBERS)),
        3 => json!(rng.next() as f64 / 7.0),
        4 => json!(*rng.pick(WORDS)),
        5 => json!("x".repeat(rng.below(100_000))),
        6 => {
            // Deep nesting, as far as serde_json's own parser would ever accept (128).
            let mut value = json!(1);
            for _ in 0..rng.below(120) {
                value = json!([value]);
            }
            value
        }
        7 => Value::Array(
            (0..rng.below(4))
                .map(|_| random_value(rng, depth + 1))
                .collect(),
        ),
        _ => {
            let mut map = Map::new();
            for _ in 0..rng.below(4) {
                map.insert(rng.pick(WORDS).to_string(), random_value(rng, depth + 1));
            }
            Value::Object(map)
        }
    }
}

/// Replaces one randomly chosen node of `value`, or inserts a random key into an object.
fn mutate(rng: &mut Rng, value: &mut Value, depth: usize) {
    let stop = depth > 12 || rng.chance(8);
    match value {
        Value::Object(map) if !map.is_empty() && !stop => {
            let key = map
                .keys()
                .nth(rng.below(map.len()))
                .cloned()
                .unwrap_or_default();
            if let Some(child) = map.get_mut(&key) {
                mutate(rng, child, depth + 1);
            }
        }
        Value::Array(items) if !items.is_empty() && !stop => {
            let index = rng.below(items.len());
            mutate(rng, &mut items[index], depth + 1);
        }
        Value::Object(map) if rng.chance(2) => {
            map.insert(rng.pick(WORDS).to_string(), random_value(rng, depth));
        }
        _ => *value = random_value(rng, depth),
    }
}

/// A replica count somewhere in the spec set to an extreme, the mistake that matters most.
fn extreme_replicas(rng: &mut Rng, manifest: &mut Value) {
    let Some(spec) = manifest.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    let Some(specs) = spec
        .iter_mut()
        .find(|(k, _)| k.ends_with("ReplicaSpecs"))
        .and_then(|(_, v)| v.as_object_mut())
    else {
        return;
    };
    let keys: Vec<String> = specs.keys().cloned().collect();
    if let Some(spec) = keys
        .get(rng.below(keys.len()))
        .and_then(|key| specs.get_mut(key))
        .and_then(Value::as_object_mut)
    {
        spec.insert("replicas".to_owned(), json!(*rng.pick(NUMBERS)));
    }
    if rng.chance(3) {
        let copy = specs.values().next().cloned().unwrap_or(Value::Null);
        specs.insert(rng.pick(WORDS).to_string(), copy);
    }
}

fn examples() -> Vec<Value> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("examples/") {
        let text = std::fs::read_to_string(entry.expect("entry").path()).expect("readable");
        for doc in serde_norway::Deserializer::from_str(&text) {
            let value: Value = serde::Deserialize::deserialize(doc).expect("YAML");
            if !value.is_null() {
                out.push(value);
            }
        }
    }
    out
}

const JOBSET_CONDITIONS: &[&str] = &[
    "Completed",
    "Failed",
    "Suspended",
    "StartupPolicyCompleted",
    "Other",
];

/// A JobSet and Jobs in random states for status derivation.
fn random_observation(rng: &mut Rng) -> (Value, Vec<Value>) {
    let conditions: Vec<Value> = (0..rng.below(4))
        .map(|_| json!({"type": *rng.pick(JOBSET_CONDITIONS), "status": if rng.chance(4) {"False"} else {"True"},
            "reason": *rng.pick(WORDS), "message": *rng.pick(WORDS), "lastTransitionTime": "2026-01-01T00:00:00Z"}))
        .collect();
    let restarts = *rng.pick(NUMBERS) as i32;
    let jobset = json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "fuzz"},
        "spec": {"suspend": rng.chance(3)},
        "status": {"restarts": restarts, "conditions": conditions}
    });
    let jobs = (0..rng.below(6))
        .map(|_| {
            json!({"metadata": {"name": "j", "labels": {
                "training.kubeflow.org/replica-type": rng.pick(WORDS).to_ascii_lowercase(),
                "jobset.sigs.k8s.io/restart-attempt": rng.pick(NUMBERS).to_string()}},
                "status": {"active": *rng.pick(NUMBERS) as i32, "succeeded": *rng.pick(NUMBERS) as i32,
                    "failed": *rng.pick(NUMBERS) as i32, "startTime": "2026-01-01T00:00:00Z"}})
        })
        .collect();
    (jobset, jobs)
}

/// One case: admission, compile twice, status twice. Returns what it saw, for the summary.
fn run_case(rng: &mut Rng, bases: &[Value]) -> (bool, bool) {
    let mut manifest = rng.pick(bases).clone();
    for _ in 0..rng.below(3) {
        if rng.chance(2) {
            extreme_replicas(rng, &mut manifest);
        } else {
            mutate(rng, &mut manifest, 0);
        }
    }
    let admitted = admission::admit(&manifest).is_ok();
    let first = common::compile_with_test_key(&manifest, Some("fuzz"));
    let second = common::compile_with_test_key(&manifest, Some("fuzz"));
    let compiled = match (&first, &second) {
        (Ok(a), Ok(b)) => {
            let (a, b) = (a.objects().expect("JSON"), b.objects().expect("JSON"));
            assert_eq!(a, b, "compile is deterministic");
            true
        }
        (Err(a), Err(b)) => {
            assert_eq!(a.to_string(), b.to_string(), "errors are deterministic");
            false
        }
        _ => panic!("compile gave different results for the same input"),
    };

    let (jobset, jobs) = random_observation(rng);
    let jobset: JobSet = serde_json::from_value(jobset).expect("JobSet");
    let jobs: Vec<Job> = jobs
        .into_iter()
        .filter_map(|j| serde_json::from_value(j).ok())
        .collect();
    let types = ["Chief", "Master", "PS", "Worker", "Evaluator", "Launcher"];
    let present = &types[..rng.below(types.len() + 1)];
    let subject = Subject {
        kind: "TFJob",
        name: "fuzz",
        operator_name: "tfjob-controller",
        replica_types: present,
        selector: false,
        detailed_failure: false,
    };
    let now = Time(Timestamp::from_second(1_800_000_000).expect("time"));
    let observed = Observed {
        jobset: Some(&jobset),
        jobs: &jobs,
    };
    let once = status::derive(&subject, None, &observed, &now);
    let again = status::derive(&subject, None, &observed, &now);
    assert_eq!(once, again, "status is deterministic");
    let next = status::derive(&subject, Some(&once), &observed, &now);
    if status::is_terminal(&once) {
        assert_eq!(next, once, "a terminal status never changes");
    }
    (admitted, compiled)
}

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))?
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

#[test]
fn admission_compile_and_status_survive_arbitrary_input() {
    let cases: u64 = std::env::var("TRAINSET_FUZZ_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(3_000);
    let seed: u64 = std::env::var("TRAINSET_FUZZ_SEED")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0x07a1_15e7);
    let bases = examples();
    let started = Instant::now();
    let (mut admitted, mut compiled) = (0u64, 0u64);
    // Panics are caught per case to name the seed; the default hook would print each one.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let mut failure = None;
    for case in 0..cases {
        let case_seed = seed ^ case.wrapping_mul(0x2545_f491_4f6c_dd1d);
        let outcome = catch_unwind(AssertUnwindSafe(|| run_case(&mut Rng(case_seed), &bases)));
        match outcome {
            Ok((a, c)) => {
                admitted += u64::from(a);
                compiled += u64::from(c);
            }
            Err(panic) => {
                let message = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                    .unwrap_or_default();
                failure = Some(format!("case {case} (seed {case_seed}): {message}"));
                break;
            }
        }
    }
    std::panic::set_hook(hook);
    let peak = peak_rss_kib();
    println!(
        "fuzz: {cases} cases from seed {seed} in {:.1}s: {admitted} admitted, {compiled} compiled, 0 panics, peak RSS {} MiB",
        started.elapsed().as_secs_f64(),
        peak / 1024
    );
    assert!(failure.is_none(), "{}", failure.unwrap_or_default());
    assert!(peak < MAX_PEAK_RSS_KIB, "peak RSS {peak} KiB");
}
