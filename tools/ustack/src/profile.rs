//! `ustack profile on|off|show`: the sampled profiler of a running instance, over its
//! control socket (`{"cmd":"profile","action":...}`, `ustack_runtime::control`).

use std::path::PathBuf;
use std::process::ExitCode;

use serde_json::json;

use crate::control;

/// Arguments of `ustack profile`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// `on` (start sampling, forgetting an earlier profile), `off` (stop; what was sampled
    /// stays to be shown), or `show` (the table: nanoseconds per packet received, by stage).
    #[arg(value_parser = ["on", "off", "show"], default_value = "show")]
    action: String,
    /// `show`: print the JSON answer (stages, folded stacks) instead of the table.
    #[arg(long)]
    json: bool,
    /// `show`: also write the profile as folded stacks (flamegraph.pl's input) to FILE.
    #[arg(long, value_name = "FILE")]
    folded: Option<PathBuf>,
    /// The instance's control socket (see `ustack serve --help`).
    #[arg(long)]
    control: Option<PathBuf>,
}

pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let path = control::path(args.control.as_deref());
    let v = control::request(&path, &json!({ "cmd": "profile", "action": args.action }))?;
    if args.action != "show" {
        let state = if v["enabled"] == true { "on" } else { "off" };
        println!("profile: {state}");
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(file) = &args.folded {
        std::fs::write(file, v["folded"].as_str().unwrap_or_default())?;
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        let state = if v["enabled"] == true { "on" } else { "off" };
        println!(
            "profile ({state}): ns per packet received by stage, one shard-loop iteration in {} sampled",
            v["sample_every"]
        );
        print!("{}", v["table"].as_str().unwrap_or_default());
    }
    Ok(ExitCode::SUCCESS)
}
