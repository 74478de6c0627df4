//! `ustack sysctl`: a running instance's tunables by their Linux names, read and set
//! through its control socket (validated by every shard's stack); or, with `--defaults`,
//! ustack's own table of defaults, ranges and units.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use serde_json::json;
use ustack_stack::Sysctl;

use crate::control;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// A tunable's name to show, or `name=value` to set. Without one: all of them.
    setting: Option<String>,
    /// Also print range, unit and description (like `ip-sysctl.rst`).
    #[arg(short, long)]
    verbose: bool,
    /// ustack's defaults, without a running instance (`name=value` is only validated).
    #[arg(long)]
    defaults: bool,
    /// The instance's control socket (see `ustack serve --help`).
    #[arg(long, conflicts_with = "defaults")]
    control: Option<PathBuf>,
}

pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let setting = args.setting.as_deref().map(parse).transpose()?;
    if args.defaults {
        return defaults(setting, args.verbose);
    }
    let path = control::path(args.control.as_deref());
    match setting {
        None => {
            let v = control::request(&path, &json!({ "cmd": "sysctl" }))?;
            for pair in v["sysctls"].as_array().into_iter().flatten() {
                let name = pair[0].as_str().unwrap_or_default();
                if let Some(info) = Sysctl::info(name) {
                    print_one(info, pair[1].as_u64().unwrap_or(0), args.verbose);
                }
            }
        }
        Some((info, value)) => {
            let v = control::request(
                &path,
                &json!({ "cmd": "sysctl", "name": info.name, "value": value }),
            )?;
            print_one(info, v["value"].as_u64().unwrap_or(0), args.verbose);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `name` or `name=value`, the name known and the value a number (range checks are the
/// stack's, on `set`).
pub(crate) fn parse(s: &str) -> anyhow::Result<(&'static ustack_stack::SysctlInfo, Option<u64>)> {
    let (name, value) = match s.split_once('=') {
        Some((n, v)) => (n.trim(), Some(v.trim())),
        None => (s.trim(), None),
    };
    let info = Sysctl::info(name)
        .with_context(|| format!("unknown sysctl {name:?} (see `ustack sysctl --defaults`)"))?;
    let value = value
        .map(|v| {
            v.parse::<u64>()
                .with_context(|| format!("{name}: {v:?} is not a non-negative integer"))
        })
        .transpose()?;
    Ok((info, value))
}

fn defaults(
    setting: Option<(&'static ustack_stack::SysctlInfo, Option<u64>)>,
    verbose: bool,
) -> anyhow::Result<ExitCode> {
    match setting {
        None => {
            for info in Sysctl::TABLE {
                print_one(info, info.default, verbose);
            }
        }
        Some((info, None)) => print_one(info, info.default, verbose),
        Some((info, Some(value))) => {
            let mut s = Sysctl::default();
            if let Err(e) = s.set(info.name, value) {
                bail!("{e}");
            }
            print_one(info, value, verbose);
            eprintln!("(valid; --defaults applies it nowhere: drop it to set a running instance)");
        }
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
