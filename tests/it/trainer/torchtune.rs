//! torchtune runtimes: `tune run` with the recipe and config the model, node count, processes
//! and tuning ask for.

use serde_json::{Value, json};

use super::*;

/// The spec of a shipped torchtune runtime (`deploy/runtimes/torchtune.yaml`).
pub fn torchtune_runtime(name: &str) -> Value {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/runtimes/torchtune.yaml"
    ))
    .expect("deploy/runtimes/torchtune.yaml");
    serde_norway::Deserializer::from_str(&text)
        .map(|document| <Value as serde::Deserialize>::deserialize(document).expect("YAML"))
        .find(|runtime| runtime["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no runtime {name}"))["spec"]
        .clone()
}

/// The TrainJob the SDK's `train()` makes for a `BuiltinTrainer` (`TorchTuneConfig` with LoRA and
/// a dataset config) with Hugging Face initializers, on one node of two GPUs.
#[test]
fn an_sdk_builtin_trainer_on_a_torchtune_runtime() {
    let jobset = compile_named(
        torchtune_runtime("torchtune-llama3.2-1b"),
        "torchtune-llama3.2-1b",
        json!({
            "runtimeRef": {"name": "torchtune-llama3.2-1b"},
            "initializer": {
                "dataset": {"storageUri": "hf://tatsu-lab/alpaca/data"},
                "model": {"storageUri": "hf://meta-llama/Llama-3.2-1B-Instruct"}
            },
            "trainer": {
                "numNodes": 1,
                "resourcesPerNode": {"limits": {"nvidia.com/gpu": "2"}, "requests": {"nvidia.com/gpu": "2"}},
                "command": ["tune", "run"],
                "args": ["dtype=bf16", "batch_size=2", "epochs=1", "dataset.data_dir=/workspace/dataset/data",
                         "model.lora_rank=8", "model.lora_attn_modules=[q_proj,v_proj]",
                         "dataset=torchtune.datasets.instruct_dataset", "dataset.source=parquet"]
            }
        }),
    )
    .expect("compiles");
    let yaml = serde_norway::to_string(&jobset).expect("YAML");
    insta::assert_snapshot!(yaml);
}

/// torchtune's command (recipe, config, rendezvous, the runtime's paths) and Trainer's torchtune
/// rules, each an error naming the field.
#[test]
fn torchtune_recipes_configs_and_rules() {
    let tune = |runtime: &str, trainer: Value| -> Result<Vec<String>, String> {
        // Other names reuse the 1B runtime's template: the model is read from the name.
        let shipped = ["torchtune-llama3.2-3b", "torchtune-qwen2.5-1.5b"];
        let spec = torchtune_runtime(if shipped.contains(&runtime) {
            runtime
        } else {
            "torchtune-llama3.2-1b"
        });
        let mut trainer = trainer;
        trainer["command"] = json!(["tune", "run"]);
        let jobset = compile_named(
            spec,
            runtime,
            json!({"runtimeRef": {"name": runtime}, "trainer": trainer}),
        )?;
        let node = &jobset["spec"]["replicatedJobs"][2]["template"]["spec"]["template"]["spec"]["containers"]
            [0];
        assert_eq!(
            env_value(node, "PET_MASTER_ADDR"),
            Value::Null,
            "torchtune rendezvous is its own"
        );
        assert_eq!(
            env_value(node, "PET_NNODES"),
            json!(trainer["numNodes"].as_i64().unwrap_or(1).to_string())
        );
        Ok(serde_json::from_value(node["command"].clone()).expect("a command"))
    };
    let paths = [
        "output_dir=/workspace/output",
        "tokenizer.path=/workspace/model/original/tokenizer.model",
        "checkpointer.checkpoint_dir=/workspace/model",
    ];
    let with_paths = |head: &[&str]| -> Vec<String> {
        head.iter()
            .chain(paths.iter())
            .map(|s| (*s).to_owned())
            .collect()
    };
    let one_gpu = json!({"limits": {"nvidia.com/gpu": "1"}});

    // The runtime's two GPUs: distributed, with the first node as the rendezvous.
    assert_eq!(
        tune("torchtune-llama3.2-1b", json!({})),
        Ok(with_paths(&[
            "tune",
            "run",
            "--rdzv_endpoint=tj-node-0-0.tj:29500",
            "full_finetune_distributed",
            "--config",
            "llama3_2/1B_full"
        ]))
    );
    // One GPU: one device, no rendezvous.
    assert_eq!(
        tune(
            "torchtune-llama3.2-1b",
            json!({"resourcesPerNode": one_gpu})
        ),
        Ok(with_paths(&[
            "tune",
            "run",
            "full_finetune_single_device",
            "--config",
            "llama3_2/1B_full_single_device"
        ]))
    );
    assert_eq!(
        tune(
            "torchtune-llama3.2-3b",
            json!({"numProcPerNode": 1, "args": ["model.lora_attn_modules=[q_proj]"]})
        ),
        Ok([
            "tune",
            "run",
            "lora_finetune_single_device",
            "--config",
            "llama3_2/3B_lora_single_device",
            "output_dir=/workspace/output",
            "tokenizer.path=/workspace/model/original/tokenizer.model",
            "checkpointer.checkpoint_dir=/workspace/model"
        ]
        .map(str::to_owned)
        .to_vec())
    );
    assert_eq!(
        tune(
            "torchtune-llama3.2-1b",
            json!({"resourcesPerNode": one_gpu, "args": ["model.quantize_base=True"]})
        ),
        Ok(with_paths(&[
            "tune",
            "run",
            "lora_finetune_single_device",
            "--config",
            "llama3_2/1B_qlora_single_device"
        ]))
    );
    // Qwen's tokenizer has a merges file.
    assert_eq!(
        tune(
            "torchtune-qwen2.5-1.5b",
            json!({"numProcPerNode": 4, "args": ["model.lora_attn_modules=[q_proj]"]})
        ),
        Ok([
            "tune",
            "run",
            "--rdzv_endpoint=tj-node-0-0.tj:29500",
            "lora_finetune_distributed",
            "--config",
            "qwen2_5/1.5B_lora",
            "output_dir=/workspace/output",
            "tokenizer.path=/workspace/model/vocab.json",
            "tokenizer.merges_file=/workspace/model/merges.txt",
            "checkpointer.checkpoint_dir=/workspace/model"
        ]
        .map(str::to_owned)
        .to_vec())
    );
    // 70B: many nodes, and QLoRA across one node's devices.
    assert_eq!(
        tune("torchtune-llama3.3-70b", json!({"numNodes": 2})),
        Ok(with_paths(&[
            "tune",
            "run",
            "--rdzv_endpoint=tj-node-0-0.tj:29500",
            "full_finetune_distributed",
            "--config",
            "llama3_3/70B_full_multinode"
        ]))
    );
    assert_eq!(
        tune(
            "torchtune-llama3.3-70b",
            json!({"args": ["model.quantize_base=True"]})
        ),
        Ok(with_paths(&[
            "tune",
            "run",
            "--rdzv_endpoint=tj-node-0-0.tj:29500",
            "lora_finetune_distributed",
            "--config",
            "llama3_3/70B_qlora"
        ]))
    );
    // DoRA on a quantized base is not QLoRA.
    assert_eq!(
        tune(
            "torchtune-llama3.2-1b",
            json!({"args": ["model.quantize_base=True", "model.use_dora=True"]})
        ),
        Ok(with_paths(&[
            "tune",
            "run",
            "--rdzv_endpoint=tj-node-0-0.tj:29500",
            "full_finetune_distributed",
            "--config",
            "llama3_2/1B_full"
        ]))
    );

    let field = |result: Result<Vec<String>, String>| -> String {
        let error = result.expect_err("refused");
        error.split(':').next().unwrap_or_default().to_owned()
    };
    assert_eq!(
        field(tune("torch-distributed", json!({}))),
        "spec.runtimeRef.name"
    );
    assert_eq!(
        field(tune("torchtune-mistral-7b", json!({}))),
        "spec.runtimeRef.name"
    );
    assert_eq!(
        field(tune("torchtune-llama3.2-1b", json!({"numNodes": 2}))),
        "spec.trainer.numNodes"
    );
    assert_eq!(
        field(tune(
            "torchtune-llama3.3-70b",
            json!({"numNodes": 2, "args": ["model.lora_attn_modules=[q_proj]"]})
        )),
        "spec.trainer.numNodes"
    );
    assert_eq!(
        field(tune(
            "torchtune-qwen2.5-1.5b",
            json!({"resourcesPerNode": one_gpu, "args": ["model.quantize_base=True"]})
        )),
        "spec.runtimeRef.name"
    );
    assert_eq!(
        field(tune(
            "torchtune-llama3.2-3b",
            json!({"args": ["model.quantize_base=true"]})
        )),
        "spec.trainer.numProcPerNode"
    );
    assert_eq!(
        field(tune(
            "torchtune-llama3.2-1b",
            json!({"args": ["epochs=1", "output_dir=/tmp/out"]})
        )),
        "spec.trainer.args[1]"
    );
}

/// Without `tune run` a torchtune runtime is a torch runtime: the TrainJob's command and torchrun's
/// master variables.
#[test]
fn another_command_on_a_torchtune_runtime_is_plain_torch() {
    let jobset = compile_named(
        torchtune_runtime("torchtune-llama3.2-1b"),
        "torchtune-llama3.2-1b",
        json!({"runtimeRef": {"name": "torchtune-llama3.2-1b"}, "trainer": {"command": ["python", "tune.py"]}}),
    )
    .expect("compiles");
    let node = &jobset["spec"]["replicatedJobs"][2]["template"]["spec"]["template"]["spec"]["containers"]
        [0];
    assert_eq!(node["command"], json!(["python", "tune.py"]));
    assert_eq!(env_value(node, "PET_MASTER_ADDR"), "tj-node-0-0.tj");
    assert_eq!(env_value(node, "PET_NPROC_PER_NODE"), "auto");
}
