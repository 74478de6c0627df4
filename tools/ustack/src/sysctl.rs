//! `ustack sysctl`: the tunables table, and validation of `name=value`.

use std::process::ExitCode;

use anyhow::{Context, bail};
use ustack_stack::Sysctl;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// A tunable's name to show, or `name=value` to validate. Without one: all of them.
    setting: Option<String>,
    /// Also print range, unit and description (like `ip-sysctl.rst`).
    #[arg(short, long)]
    verbose: bool,
}

pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let defaults = Sysctl::default();
    match args.setting.as_deref() {
        None => {
            for info in Sysctl::TABLE {
                print_one(
                    info,
                    defaults.get(info.name).unwrap_or(info.default),
                    args.verbose,
                );
            }
        }
        Some(s) => match s.split_once('=') {
            None => {
                let info = Sysctl::info(s.trim())
                    .with_context(|| format!("unknown sysctl {s:?} (see `ustack sysctl`)"))?;
                print_one(info, info.default, args.verbose);
            }
            Some((name, value)) => {
                let value: u64 = value.trim().parse().with_context(|| {
                    format!("{}: {value:?} is not a non-negative integer", name.trim())
                })?;
                let mut s = Sysctl::default();
                if let Err(e) = s.set(name.trim(), value) {
                    bail!("{e}");
                }
                println!("{} = {value}", name.trim());
                eprintln!("(valid; no running instance to apply it to until `ustack serve` lands)");
            }
        },
    }
    Ok(ExitCode::SUCCESS)
}

fn print_one(info: &ustack_stack::SysctlInfo, value: u64, verbose: bool) {
    if verbose {
        println!(
            "{} = {value}\t[{}..={}] {}\t{}",
            info.name, info.min, info.max, info.unit, info.doc
        );
    } else {
        println!("{} = {value}", info.name);
    }
}
