//! `trainset takeover --dry-run`: what trainset will do with each training job already in a
//! cluster, before it runs there (docs/migration.md). Read only: it lists the jobs, what
//! another operator made for them and their JobSets, plans each job as the controller would,
//! and says the plan's verdict.

use std::collections::HashMap;

use jobset_types::JobSet;
use jobset_types::keys::label as jobset_label;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use kube::{Client, Resource, ResourceExt};

use super::fetch::{self, Compiling};
use super::{Error, Settings, kube_error};
use crate::api::trainer::TrainJob;
use crate::compile::JOB_NAME;
use crate::kinds::{Served, Visitor, visit_all};
use crate::plan::v1::takeover::{self, Foreign, Verdict};
use crate::plan::v1::{self as plan, Facts};
use crate::plan::{Holder, holder};
use crate::status::trainer::is_finished;

/// One job and what trainset will do with it.
#[derive(Debug)]
pub struct Row {
    pub namespace: String,
    pub kind: String,
    pub name: String,
    pub verdict: Verdict,
    pub why: String,
}

/// What is read once for every job: JobSets by (namespace, name), and the pods labelled as a
/// training job's that no JobSet made.
struct Cluster {
    client: Client,
    namespace: Option<String>,
    jobsets: HashMap<(String, String), JobSet>,
    pods: Vec<Pod>,
}

impl Cluster {
    fn api<T>(&self) -> Api<T>
    where
        T: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
    {
        match &self.namespace {
            Some(namespace) => Api::namespaced(self.client.clone(), namespace),
            None => Api::all(self.client.clone()),
        }
    }

    fn jobset(&self, namespace: &str, name: &str) -> Option<&JobSet> {
        self.jobsets.get(&(namespace.to_owned(), name.to_owned()))
    }
}

/// The verdict on every training job in `namespace` (every namespace when `None`), for a
/// trainset started with `settings`.
pub async fn dry_run(
    client: Client,
    namespace: Option<&str>,
    settings: &Settings,
) -> Result<Vec<Row>, Error> {
    let mut cluster = Cluster {
        client,
        namespace: namespace.map(str::to_owned),
        jobsets: HashMap::new(),
        pods: Vec::new(),
    };
    let jobsets = listed(cluster.api::<JobSet>().list(&ListParams::default()).await)
        .map_err(kube_error("listing", "JobSets"))?;
    cluster.jobsets = jobsets
        .into_iter()
        .map(|j| ((j.namespace().unwrap_or_default(), j.name_any()), j))
        .collect();
    let foreign =
        ListParams::default().labels(&format!("{JOB_NAME},!{}", jobset_label::JOBSET_NAME));
    cluster.pods = cluster
        .api::<Pod>()
        .list(&foreign)
        .await
        .map_err(kube_error("listing", "pods"))?
        .items;
    let compiling = Compiling {
        cluster_domain: settings.cluster_domain.as_deref(),
        gang_scheduler: &settings.gang_scheduler,
        kubectl_delivery_image: &settings.kubectl_delivery_image,
    };
    let mut kinds = Kinds(Vec::new());
    visit_all(&mut kinds);
    let mut rows = Vec::new();
    for kind in kinds.0 {
        match kind {
            Kind::V1(rows_of) => rows.extend(rows_of(&cluster, &compiling).await?),
            Kind::Trainer => rows.extend(trainjob_rows(&cluster).await?),
        }
    }
    Ok(rows)
}

/// A list that a missing API (a CRD not installed) answers empty.
fn listed<T: Clone>(
    result: Result<kube::core::ObjectList<T>, kube::Error>,
) -> Result<Vec<T>, kube::Error> {
    match result {
        Ok(list) => Ok(list.items),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(Vec::new()),
        Err(error) => Err(error),
    }
}

type RowsOf = for<'a> fn(
    &'a Cluster,
    &'a Compiling<'a>,
) -> futures::future::BoxFuture<'a, Result<Vec<Row>, Error>>;

enum Kind {
    V1(RowsOf),
    Trainer,
}

struct Kinds(Vec<Kind>);

impl Visitor for Kinds {
    fn v1<K: Served>(&mut self) {
        self.0.push(Kind::V1(|cluster, compiling| {
            Box::pin(v1_rows::<K>(cluster, compiling))
        }));
    }

    fn trainer(&mut self) {
        self.0.push(Kind::Trainer);
    }
}

/// Every job of kind `K`, each planned as the controller would plan it now.
async fn v1_rows<K: Served>(
    cluster: &Cluster,
    compiling: &Compiling<'_>,
) -> Result<Vec<Row>, Error> {
    let resource = ApiResource::erase::<K>(&());
    let api: Api<DynamicObject> = match &cluster.namespace {
        Some(namespace) => Api::namespaced_with(cluster.client.clone(), namespace, &resource),
        None => Api::all_with(cluster.client.clone(), &resource),
    };
    let kind = K::kind(&()).into_owned();
    let listed = listed(api.list(&ListParams::default()).await)
        .map_err(kube_error("listing", kind.clone()))?;
    let now = Time(Timestamp::now());
    let mut rows = Vec::new();
    for object in listed {
        let (namespace, name) = (object.namespace().unwrap_or_default(), object.name_any());
        let row = |verdict, why| Row {
            namespace: namespace.clone(),
            kind: kind.clone(),
            name: name.clone(),
            verdict,
            why,
        };
        let job: K = match serde_json::to_value(&object).and_then(serde_json::from_value) {
            Ok(job) => job,
            Err(error) => {
                rows.push(row(
                    Verdict::Refuse,
                    format!("{kind} {name} cannot be read: {error}"),
                ));
                continue;
            }
        };
        let jobset = cluster.jobset(&namespace, &name);
        let own =
            jobset.filter(|j| holder(j.meta(), &kind, &name, job.uid().as_deref()) == Holder::This);
        let pods: Vec<Pod> = cluster
            .pods
            .iter()
            .filter(|p| p.namespace().as_deref() == Some(namespace.as_str()))
            .filter(|p| p.labels().get(JOB_NAME) == Some(&name))
            .cloned()
            .collect();
        let launcher = match takeover::launcher_job(&job) {
            Some(launcher) => Some(
                Api::<Job>::namespaced(cluster.client.clone(), &namespace)
                    .get_opt(&launcher)
                    .await
                    .map_err(kube_error("getting Job", launcher))?,
            ),
            None => None,
        };
        let needs = plan::needs(&job, jobset, false);
        let compiled = if needs.compiled {
            Some(fetch::compile(&job, &namespace, compiling)?)
        } else {
            None
        };
        let facts = Facts {
            job: &job,
            jobset,
            jobs: &[],
            compiled,
            own_workload: false,
            now: now.clone(),
            since_status_write: None,
            creation_failure: None,
            autoscaler: None,
            exec_targets: None,
            foreign: Foreign {
                pods: &pods,
                launcher: launcher.as_ref().map(Option::as_ref),
                services: &[],
            },
        };
        let (verdict, why) = match plan::plan(facts) {
            Ok(plan) => takeover::verdict(&job, own.is_some(), &plan),
            Err(error) => (Verdict::Refuse, error.to_string()),
        };
        rows.push(row(verdict, why));
    }
    Ok(rows)
}

/// Every TrainJob: Trainer v2.3.0 ran each as a JobSet the TrainJob owns, which trainset
/// reports from as it is.
async fn trainjob_rows(cluster: &Cluster) -> Result<Vec<Row>, Error> {
    let listed = listed(cluster.api::<TrainJob>().list(&ListParams::default()).await)
        .map_err(kube_error("listing", "TrainJobs"))?;
    let kind = TrainJob::kind(&()).into_owned();
    Ok(listed
        .into_iter()
        .map(|job| {
            let (namespace, name) = (job.namespace().unwrap_or_default(), job.name_any());
            let jobset = cluster.jobset(&namespace, &name);
            let holder = jobset.map(|j| holder(j.meta(), &kind, &name, job.uid().as_deref()));
            let suspended = job.spec.suspend == Some(true);
            let (verdict, why) = if job.status.as_ref().is_some_and(is_finished) {
                (Verdict::Finished, "finished: kept as it is".to_owned())
            } else if suspended && holder == Some(Holder::This) {
                (
                    Verdict::Held,
                    format!("suspended: its JobSet {name} stays suspended until it is resumed"),
                )
            } else {
                match holder {
                    Some(Holder::This) => (
                        Verdict::Adopt,
                        format!(
                            "its JobSet {name} is the TrainJob's: trainset runs it on as it is"
                        ),
                    ),
                    Some(Holder::Earlier) => (
                        Verdict::Wait,
                        format!(
                            "JobSet {name} belongs to an earlier TrainJob and is being deleted"
                        ),
                    ),
                    Some(Holder::Foreign(other)) => (
                        Verdict::Refuse,
                        crate::plan::name_conflict(&kind, &name, &other),
                    ),
                    None if suspended => (
                        Verdict::Held,
                        "suspended: no JobSet until it is resumed".to_owned(),
                    ),
                    None => (Verdict::Start, "trainset makes its JobSet".to_owned()),
                }
            };
            Row {
                namespace,
                kind: kind.clone(),
                name,
                verdict,
                why,
            }
        })
        .collect())
}
