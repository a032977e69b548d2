use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};

/// Serves the Kubeflow training APIs on JobSet.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the controller.
    Run,
    /// Compile training job manifests into the objects the controller would create.
    Render {
        /// The manifest file, or - for standard input.
        #[arg(short = 'f', long = "filename", env = "TRAINSET_RENDER_FILE")]
        file: PathBuf,
        /// Namespace for manifests that name none.
        #[arg(
            short = 'n',
            long,
            env = "TRAINSET_RENDER_NAMESPACE",
            default_value = "default"
        )]
        namespace: String,
        /// Output format.
        #[arg(short = 'o', long = "output", env = "TRAINSET_RENDER_OUTPUT", value_enum, default_value_t = Output::Yaml)]
        output: Output,
    },
    /// Print the CRDs of every training kind, or write one file each into a directory.
    Crds {
        /// Write `<group>_<plural>.yaml` files into this directory instead of printing.
        #[arg(long, env = "TRAINSET_CRDS_DIR")]
        dir: Option<PathBuf>,
    },
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum Output {
    Yaml,
    Json,
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Run => bail!("`trainset run` is not implemented yet (issue 5)"),
        Command::Render {
            file,
            namespace,
            output,
        } => render(&file, &namespace, output),
        Command::Crds { dir } => print_crds(dir),
    }
}

fn render(file: &Path, namespace: &str, output: Output) -> anyhow::Result<()> {
    let input = if file == Path::new("-") {
        std::io::read_to_string(std::io::stdin()).context("reading standard input")?
    } else {
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?
    };
    let format = match output {
        Output::Yaml => trainset::render::Format::Yaml,
        Output::Json => trainset::render::Format::Json,
    };
    match trainset::render::render(&input, namespace, format) {
        Ok(text) => {
            print!("{text}");
            Ok(())
        }
        Err(errors) => {
            for error in &errors {
                eprintln!("error: {error}");
            }
            std::process::exit(1);
        }
    }
}

fn print_crds(dir: Option<PathBuf>) -> anyhow::Result<()> {
    let crds = trainset::crds::all()?;
    match dir {
        Some(dir) => {
            for crd in &crds {
                let path = dir.join(trainset::crds::file_name(crd));
                std::fs::write(&path, trainset::crds::to_yaml(crd)?)
                    .with_context(|| format!("writing {}", path.display()))?;
            }
        }
        None => {
            for crd in &crds {
                print!("---\n{}", trainset::crds::to_yaml(crd)?);
            }
        }
    }
    Ok(())
}
