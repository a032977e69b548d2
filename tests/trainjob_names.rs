//! The committed `deploy/trainjob-names.yaml` is exactly what `trainset trainjob-names` prints.

use std::path::Path;

#[test]
fn committed_policies_match_the_code() {
    let path = Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/trainjob-names.yaml"
    ));
    let committed = std::fs::read_to_string(path).unwrap_or_else(|e| {
        panic!("deploy/trainjob-names.yaml: {e}; run `cargo run -- trainjob-names`")
    });
    assert_eq!(
        committed,
        trainset::trainjob_names::to_yaml().expect("YAML"),
        "deploy/trainjob-names.yaml drifted; run \
         `cargo run -q -- trainjob-names > deploy/trainjob-names.yaml`"
    );
}
