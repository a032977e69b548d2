//! Every example, compiled by trainset, is accepted by the real JobSet webhook and completes on
//! the local control plane.

use std::time::Duration;

use jobset_types::JobSet;
use jobset_types::keys::condition;
use kube::api::Api;
use trainset::compile::{Options, SshKeyPair};
use trainset::kinds::compile_manifest;
use trainset_e2e::{TestNamespace, apply, client, repo_root, wait_for, yaml_documents};

#[tokio::test]
#[ignore = "needs the local control plane: e2e/cluster up"]
async fn every_compiled_example_completes() {
    let client = client().await;
    let ns = TestNamespace::create(&client, "compiled").await;
    let key = SshKeyPair::generate().expect("SSH key");
    let options = Options {
        default_namespace: Some(&ns.name),
        ssh_key: Some(&key),
        ..Default::default()
    };
    let mut names = Vec::new();
    for entry in std::fs::read_dir(repo_root().join("examples")).expect("examples/") {
        let path = entry.expect("entry").path();
        for manifest in yaml_documents(&std::fs::read_to_string(&path).expect("readable")) {
            let compiled = compile_manifest(manifest, &options)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            // Auxiliary objects first: the launcher mounts them.
            let mut objects = compiled.objects().expect("objects");
            objects.rotate_left(1);
            for object in &objects {
                apply(&client, object, Some(&ns.name))
                    .await
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            }
            names.push(compiled.jobset.metadata.name.clone().expect("name"));
        }
    }
    assert!(names.len() >= 10);
    let jobsets: Api<JobSet> = Api::namespaced(client.clone(), &ns.name);
    for name in names {
        wait_for(
            Duration::from_secs(120),
            &format!("JobSet {name} to complete"),
            || async {
                let js = jobsets.get(&name).await.ok()?;
                let conditions = js.status?.conditions;
                if let Some(failed) = conditions
                    .iter()
                    .find(|c| c.type_ == condition::FAILED && c.status == "True")
                {
                    panic!("JobSet {name} failed: {} {}", failed.reason, failed.message);
                }
                conditions
                    .iter()
                    .any(|c| c.type_ == condition::COMPLETED && c.status == "True")
                    .then_some(())
            },
        )
        .await;
    }
    ns.delete().await;
}
