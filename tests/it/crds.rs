//! The committed CRDs under `crds/` are exactly what `trainset crds` generates.

use std::collections::BTreeSet;
use std::path::Path;

use pretty_assertions::assert_eq;

fn crds_dir() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/crds"))
}

#[test]
fn committed_crds_match_the_code() {
    let generated = trainset::crds::all().expect("CRDs build");
    let mut expected_files = BTreeSet::new();
    for crd in &generated {
        let name = trainset::crds::file_name(crd);
        let committed = std::fs::read_to_string(crds_dir().join(&name)).unwrap_or_else(|e| {
            panic!("crds/{name} missing ({e}); run `cargo run -- crds --dir crds`")
        });
        let fresh = trainset::crds::to_yaml(crd).expect("YAML");
        assert!(
            committed == fresh,
            "crds/{name} drifted from the code; run `cargo run -- crds --dir crds`"
        );
        expected_files.insert(name);
    }
    let present: BTreeSet<String> = std::fs::read_dir(crds_dir())
        .expect("crds/")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        present, expected_files,
        "crds/ holds exactly the generated files"
    );
}

#[test]
fn crds_carry_names_columns_and_subresources() {
    let crds = trainset::crds::v1().expect("CRDs build");
    let kinds: Vec<&str> = crds.iter().map(|c| c.spec.names.kind.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "TFJob",
            "PyTorchJob",
            "XGBoostJob",
            "PaddleJob",
            "JAXJob",
            "MPIJob"
        ]
    );
    for crd in &crds {
        let names = &crd.spec.names;
        assert_eq!(
            names.categories.as_deref(),
            Some(&["kubeflow".to_owned(), "all".to_owned()][..])
        );
        assert_eq!(
            names.short_names.as_ref().map(Vec::len),
            Some(1),
            "{}",
            names.kind
        );
        let version = &crd.spec.versions[0];
        let columns: Vec<&str> = version
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(columns, ["State", "Age"]);
        let subresources = version.subresources.as_ref().expect("subresources");
        assert!(
            subresources.status.is_some(),
            "{} has a status subresource",
            names.kind
        );
        // As v1.9.4's CRDs: the kinds whose Worker count an HPA or `kubectl scale` may change.
        assert_eq!(
            subresources.scale.is_some(),
            ["PyTorchJob", "PaddleJob", "JAXJob"].contains(&names.kind.as_str()),
            "{}",
            names.kind
        );
    }
}

/// The Kubeflow SDK's models refuse a job without runPolicy, so the apiserver stores one.
#[test]
fn every_crd_defaults_run_policy_to_empty() {
    for crd in trainset::crds::v1().expect("CRDs build") {
        let schema = serde_json::to_value(&crd.spec.versions[0].schema).expect("schema as JSON");
        let run_policy =
            &schema["openAPIV3Schema"]["properties"]["spec"]["properties"]["runPolicy"];
        assert_eq!(
            run_policy["default"],
            serde_json::json!({}),
            "{}",
            crd.spec.names.kind
        );
    }
}
