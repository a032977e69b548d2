//! torchtune on a torch runtime (Trainer v2.3.0, `spec.trainer.command: [tune, run]`, what the
//! Kubeflow SDK's `BuiltinTrainer` sends): the model comes from the runtime's name
//! (`torchtune-llama3.2-1b` → `llama3_2/1B`), the recipe and config from nodes, processes and
//! the LoRA/QLoRA args, the rendezvous endpoint from the first node, and the paths the
//! initializers fill from the runtime's own command. The TrainJob's args stay its args.

use super::PORT;
use super::policy::Node;
use super::procs::{Procs, procs_per_node};
use crate::api::trainer::Trainer;
use crate::compile::CompileError;

const ENTRYPOINT: [&str; 2] = ["tune", "run"];

const LLAMA3_2_1B: &str = "llama3_2/1B";
const LLAMA3_2_3B: &str = "llama3_2/3B";
const LLAMA3_3_70B: &str = "llama3_3/70B";
const QWEN2_5_1_5B: &str = "qwen2_5/1.5B";
const MODELS: [&str; 4] = [LLAMA3_2_1B, LLAMA3_2_3B, LLAMA3_3_70B, QWEN2_5_1_5B];

/// Config items the runtime's command sets for the volume the initializers fill.
const RUNTIME_CONFIGS: [&str; 4] = [
    "output_dir",
    "tokenizer.path",
    "tokenizer.merges_file",
    "checkpointer.checkpoint_dir",
];

/// Whether a `key=value` item sets one of [`RUNTIME_CONFIGS`].
fn sets_runtime_path(item: &str) -> bool {
    RUNTIME_CONFIGS.contains(&item.split('=').next().unwrap_or_default())
}

const LORA_ATTN_MODULES: &str = "model.lora_attn_modules";
const QUANTIZE_BASE: &str = "model.quantize_base";
const USE_DORA: &str = "model.use_dora";

/// Whether the trainer runs torchtune.
pub fn applies(trainer: Option<&Trainer>) -> bool {
    trainer.is_some_and(|t| t.command == ENTRYPOINT)
}

/// `torchtune-<family>-<size>` → `<family with _ for .>/<SIZE>`; anything else names no model.
fn model(runtime: &str) -> Option<String> {
    let parts: Vec<&str> = runtime.split('-').collect();
    let [_, family, size] = parts[..] else {
        return None;
    };
    Some(format!(
        "{}/{}",
        family.replace('.', "_"),
        size.to_uppercase()
    ))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tuning {
    Full,
    Lora,
    /// LoRA on a quantized base (not with DoRA).
    Qlora,
}

/// An arg `key=value` whose key contains `item` and whose value is Python's `True`.
fn enabled(args: &[String], item: &str) -> bool {
    args.iter().any(|arg| {
        arg.split_once('=').is_some_and(|(key, value)| {
            key.contains(item) && value.trim().eq_ignore_ascii_case("true")
        })
    })
}

fn tuning(args: &[String]) -> Tuning {
    if enabled(args, QUANTIZE_BASE) && !enabled(args, USE_DORA) {
        Tuning::Qlora
    } else if args.iter().any(|arg| arg.contains(LORA_ATTN_MODULES)) {
        Tuning::Lora
    } else {
        Tuning::Full
    }
}

/// The recipe and the config's suffix: one device when one node runs one process (or has one
/// GPU), else distributed; LoRA and QLoRA on one node only.
fn recipe(count: i32, procs: Procs, gpus: i64, tuning: Tuning) -> (&'static str, &'static str) {
    let single_device = count == 1 && (procs == Procs::Count(1) || gpus == 1);
    match (count, single_device, tuning) {
        (1, true, Tuning::Qlora) => ("lora_finetune_single_device", "_qlora_single_device"),
        (1, true, Tuning::Lora) => ("lora_finetune_single_device", "_lora_single_device"),
        (1, true, Tuning::Full) => ("full_finetune_single_device", "_full_single_device"),
        (1, false, Tuning::Qlora) => ("lora_finetune_distributed", "_qlora"),
        (1, false, Tuning::Lora) => ("lora_finetune_distributed", "_lora"),
        (1, false, Tuning::Full) => ("full_finetune_distributed", "_full"),
        _ => ("full_finetune_distributed", "_full_multinode"),
    }
}

/// `tune run [--rdzv_endpoint=<first node>:29500] <recipe> --config <model><suffix>` and the
/// runtime command's output, tokenizer and checkpoint paths; or the first of Trainer's
/// torchtune rules the TrainJob breaks, naming its field. The rules read the nodes and
/// processes the JobSet gets (Trainer's webhook reads `numNodes` without the runtime's default).
pub fn command(
    node: &Node<'_>,
    trainer: &Trainer,
    runtime_command: &[String],
) -> Result<Vec<String>, CompileError> {
    let model = model(node.runtime)
        .filter(|m| MODELS.contains(&m.as_str()))
        .ok_or_else(|| {
            CompileError::invalid(
                "spec.runtimeRef.name",
                format!(
                    "{:?} names no model torchtune runs here: torchtune-<model>-<size> for {}",
                    node.runtime,
                    MODELS.join(", ")
                ),
            )
        })?;
    let procs = procs_per_node(node);
    let tuning = tuning(&trainer.args);
    let (recipe, suffix) = recipe(node.count, procs, node.gpus, tuning);
    if node.count > 1 && model != LLAMA3_3_70B {
        return Err(CompileError::invalid(
            "spec.trainer.numNodes",
            format!("must be 1 for the {model} model"),
        ));
    }
    if node.count > 1 && tuning != Tuning::Full {
        return Err(CompileError::invalid(
            "spec.trainer.numNodes",
            "LoRA fine-tuning is not supported for multi-node training in torchtune",
        ));
    }
    if tuning == Tuning::Qlora && model == QWEN2_5_1_5B {
        return Err(CompileError::invalid(
            "spec.runtimeRef.name",
            format!("QLoRA is not supported for the {model} model"),
        ));
    }
    if suffix == "_qlora" && [LLAMA3_2_1B, LLAMA3_2_3B].contains(&model.as_str()) {
        return Err(CompileError::invalid(
            "spec.trainer.numProcPerNode",
            format!(
                "QLoRA on the {model} model runs on one device: numProcPerNode must be 1 (or auto with resourcesPerNode giving one GPU), not {procs}"
            ),
        ));
    }
    if let Some((i, arg)) = trainer
        .args
        .iter()
        .enumerate()
        .find(|(_, arg)| sets_runtime_path(arg))
    {
        return Err(CompileError::invalid(
            format!("spec.trainer.args[{i}]"),
            format!("{arg:?} sets a path the runtime manages"),
        ));
    }

    let mut command: Vec<String> = ENTRYPOINT.iter().map(|&s| s.to_owned()).collect();
    let distributed = node.count > 1
        || matches!(procs, Procs::Count(n) if n > 1)
        || (procs == Procs::Auto && node.gpus > 1);
    if distributed {
        command.push(format!("--rdzv_endpoint={}:{PORT}", node.first_host()));
    }
    command.extend([
        recipe.to_owned(),
        "--config".to_owned(),
        format!("{model}{suffix}"),
    ]);
    command.extend(
        runtime_command
            .iter()
            .filter(|item| sets_runtime_path(item))
            .cloned(),
    );
    Ok(command)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(items: &[&str]) -> Vec<String> {
        items.iter().map(|&s| s.to_owned()).collect()
    }

    #[test]
    fn the_model_comes_from_the_runtime_name() {
        assert_eq!(
            model("torchtune-llama3.2-1b").as_deref(),
            Some("llama3_2/1B")
        );
        assert_eq!(
            model("torchtune-qwen2.5-1.5b").as_deref(),
            Some("qwen2_5/1.5B")
        );
        assert_eq!(
            model("torchtune-llama3.3-70b").as_deref(),
            Some("llama3_3/70B")
        );
        assert_eq!(model("torch-distributed"), None);
        assert_eq!(model("torchtune-llama3.2-1b-mine"), None);
    }

    #[test]
    fn qlora_needs_quantize_base_true_and_no_dora() {
        assert_eq!(tuning(&args(&["model.quantize_base=True"])), Tuning::Qlora);
        assert_eq!(
            tuning(&args(&["model.quantize_base= true "])),
            Tuning::Qlora
        );
        assert_eq!(tuning(&args(&["model.quantize_base=False"])), Tuning::Full);
        assert_eq!(
            tuning(&args(&["model.quantize_base=True", "model.use_dora=True"])),
            Tuning::Full
        );
        assert_eq!(
            tuning(&args(&[
                "model.quantize_base=True",
                "model.use_dora=True",
                "model.lora_attn_modules=[q_proj,v_proj]"
            ])),
            Tuning::Lora
        );
        assert_eq!(tuning(&args(&["epochs=1"])), Tuning::Full);
    }

    #[test]
    fn recipes_follow_nodes_processes_and_gpus() {
        let one = Procs::Count(1);
        assert_eq!(
            recipe(1, one, 0, Tuning::Full),
            ("full_finetune_single_device", "_full_single_device")
        );
        assert_eq!(
            recipe(1, Procs::Auto, 1, Tuning::Lora),
            ("lora_finetune_single_device", "_lora_single_device")
        );
        assert_eq!(
            recipe(1, one, 8, Tuning::Qlora),
            ("lora_finetune_single_device", "_qlora_single_device")
        );
        assert_eq!(
            recipe(1, Procs::Auto, 2, Tuning::Full),
            ("full_finetune_distributed", "_full")
        );
        assert_eq!(
            recipe(1, Procs::Count(4), 0, Tuning::Lora),
            ("lora_finetune_distributed", "_lora")
        );
        assert_eq!(
            recipe(1, Procs::Auto, 8, Tuning::Qlora),
            ("lora_finetune_distributed", "_qlora")
        );
        assert_eq!(
            recipe(2, one, 1, Tuning::Full),
            ("full_finetune_distributed", "_full_multinode")
        );
    }
}
