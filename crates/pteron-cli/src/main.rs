//! `pteron`: inspect and run ExecuTorch `.pte` programs.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod device;
mod generate;
mod inspect;
mod ops;
mod run;
mod serve;
mod transcribe;
mod vad;

#[derive(Parser)]
#[command(
    name = "pteron",
    version,
    about = "Run PyTorch programs exported with ExecuTorch (.pte), in pure Rust"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Highest SIMD level kernels may use (for the whole process; the int8 VNNI paths need
    /// avx512, the aarch64 int8 dot products neon; avx2 and neon name the same tier). Default: the `PTERON_SIMD` environment variable, else the CPU's best.
    #[arg(long, global = true, value_enum)]
    simd: Option<Simd>,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum Simd {
    Avx512,
    Avx2,
    Neon,
    Portable,
}

/// Caps the kernels' SIMD level from `--simd` or `PTERON_SIMD` (`avx512`, `avx2`, `neon`,
/// `portable`; unset or anything else: no cap). A level of another architecture caps at its
/// tier: `avx2` and `neon` both mean "the baseline vector ISA".
fn cap_simd(flag: Option<Simd>) {
    use pteron::cpu::{set_max_level, Level};
    let level = match flag {
        Some(Simd::Avx512) => Level::Avx512,
        Some(Simd::Avx2) => Level::Avx2,
        Some(Simd::Neon) => Level::Neon,
        Some(Simd::Portable) => Level::Portable,
        None => match std::env::var("PTERON_SIMD") {
            Ok(v) if v == "portable" => Level::Portable,
            Ok(v) if v == "avx2" => Level::Avx2,
            Ok(v) if v == "neon" => Level::Neon,
            _ => Level::Avx512,
        },
    };
    set_max_level(level);
}

#[derive(Subcommand)]
enum Command {
    /// Show a program's methods, inputs and outputs, operators, delegates, segments and memory.
    Inspect {
        model: PathBuf,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Run a method on inputs from .npy files (or deterministic inputs) and save the outputs.
    Run(run::RunArgs),
    /// List the registered kernels (operator names) and the dtypes each computes in; with
    /// `--for`, the operators given programs call (for selective builds).
    Ops {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Only kernels whose name contains this text.
        #[arg(long)]
        filter: Option<String>,
        /// The operators these programs call (every method), each with the kernel library
        /// that has it.
        #[arg(long = "for", num_args = 1.., value_name = "PTE")]
        programs: Vec<PathBuf>,
        /// `gpu`: the operators the GPU engine runs instead of the CPU's kernels.
        #[arg(long, value_enum, conflicts_with = "programs")]
        device: Option<device::Device>,
        /// With `--for`: print Rust source of a `pteron_core::OpSelection` for these operators
        /// (`pteron_kernels::register_selected::<ProgramOps>` then links only their kernels).
        #[arg(long, requires = "programs")]
        emit_rust: bool,
    },
    /// List the GPU adapters the GPU engine can use (`--device gpu --adapter NAME`).
    Devices {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Generate text with an LLM program (ExecuTorch LLM export) from a prompt, streaming it.
    Generate(generate::GenerateArgs),
    /// Chat interactively with an LLM program, using its chat template.
    Chat(generate::ChatArgs),
    /// Serve an LLM program over OpenAI's HTTP API (chat and text completions, streaming).
    Serve(serve::ServeArgs),
    /// Find the speech in a WAV file (Silero VAD): segments with start and end times.
    Vad(vad::VadArgs),
    /// Transcribe a WAV file with a Whisper program (encode/decode methods).
    Transcribe(transcribe::TranscribeArgs),
}

/// `print!` panics when stdout is a pipe whose reader has gone (`pteron ops | head`): end
/// quietly then, with the status a process killed by SIGPIPE has (128 + 13), as Unix tools do.
fn exit_quietly_on_broken_pipe() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let msg = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if msg.starts_with("failed printing to stdout") && msg.contains("Broken pipe") {
            std::process::exit(141);
        }
        default(info);
    }));
}

fn main() -> ExitCode {
    exit_quietly_on_broken_pipe();
    let cli = Cli::parse();
    cap_simd(cli.simd);
    let result = match cli.command {
        Command::Inspect { model, json } => inspect::inspect(&model, json),
        Command::Run(args) => run::run(&args),
        Command::Devices { json } => device::devices(json),
        Command::Ops {
            json,
            filter,
            programs,
            emit_rust,
            device,
        } => {
            if device == Some(device::Device::Gpu) {
                device::gpu_ops(json)
            } else if programs.is_empty() {
                ops::ops(json, filter.as_deref())
            } else {
                ops::program_ops(&programs, json, emit_rust)
            }
        }
        Command::Generate(args) => generate::generate(&args),
        Command::Chat(args) => generate::chat(&args),
        Command::Serve(args) => serve::serve(&args),
        Command::Vad(args) => vad::vad(&args),
        Command::Transcribe(args) => transcribe::transcribe(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
