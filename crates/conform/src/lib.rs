//! Conformance scenarios for ustack, in packetdrill's script format.
//!
//! - [`parse`]: the script text format (the subset documented in docs/testing.md), with
//!   clear, line-numbered errors.
//! - [`exec`]: runs a parsed [`script::Script`] against a [`backend::Backend`] (shaped like
//!   packetdrill's `struct packetdrill_interface`): events in time order within a
//!   tolerance, sequence numbers relative to the ISNs, outbound packets compared field by
//!   field with a packetdrill-style diff on a mismatch.
//! - [`linux`]: the Linux kernel as the backend (a network namespace and a TUN of its own).
//! - [`ustack`]: ustack's stack as the backend, on a virtual clock (deterministic, fast).
//!
//! The scenarios live in `tests/conformance/` at the top of the repository; the
//! `ustack-conform` binary runs scripts by path.

pub mod backend;
pub mod exec;
pub mod linux;
pub mod packet;
pub mod parse;
pub mod script;
pub mod so;
pub mod symbols;
mod sys;
pub mod ustack;

use std::path::Path;
use std::sync::Arc;

/// Runs the script at `path` against a fresh [`linux::Linux`] backend with `config`;
/// the error names the file and line (parse errors, setup errors and failures alike).
pub fn run_linux(path: &Path, config: &exec::Config) -> Result<exec::Report, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let script =
        parse::parse(&text).map_err(|e| format!("{}:{}: {}", path.display(), e.line, e.message))?;
    // Refuse what cannot run before making a namespace for it.
    let mut cfg = config.clone();
    cfg.apply_options(&script.options)
        .map_err(|m| format!("{}: {m}", path.display()))?;
    exec::check_duration(&script, cfg.max_script_us)
        .and_then(|()| exec::check_supported(&script))
        .map_err(|f| format!("{}:{}: {}", path.display(), f.line, f.message))?;
    let backend = linux::Linux::new(&cfg)
        .map_err(|e| format!("{}: setting up the Linux backend: {e}", path.display()))?;
    exec::run(&script, Arc::new(backend), config)
        .map_err(|f| format!("{}:{}: {}", path.display(), f.line, f.message))
}

/// Runs the script at `path` against a fresh [`ustack::Ustack`] backend with `config`
/// (errors as [`run_linux`]'s).
pub fn run_ustack(path: &Path, config: &exec::Config) -> Result<exec::Report, String> {
    let (script, cfg) = load(path, config)?;
    let backend = ustack::Ustack::new(&cfg, &[])
        .map_err(|e| format!("{}: setting up the ustack backend: {e}", path.display()))?;
    exec::run(&script, Arc::new(backend), &cfg)
        .map_err(|f| format!("{}:{}: {}", path.display(), f.line, f.message))
}

/// Runs the script at `path` through the packetdrill shared library `lib` (started with
/// `flags`), as google packetdrill's `--so_filename` mode would.
pub fn run_so(
    lib: &Path,
    flags: &str,
    path: &Path,
    config: &exec::Config,
) -> Result<exec::Report, String> {
    so::run(lib, flags, path, config)
}

/// Reads, parses and checks the script at `path`; the configuration with its options.
pub fn load(path: &Path, config: &exec::Config) -> Result<(script::Script, exec::Config), String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let script =
        parse::parse(&text).map_err(|e| format!("{}:{}: {}", path.display(), e.line, e.message))?;
    let mut cfg = config.clone();
    cfg.apply_options(&script.options)
        .map_err(|m| format!("{}: {m}", path.display()))?;
    exec::check_duration(&script, cfg.max_script_us)
        .and_then(|()| exec::check_supported(&script))
        .map_err(|f| format!("{}:{}: {}", path.display(), f.line, f.message))?;
    Ok((script, cfg))
}

/// The script files (`*.pkt`) under `dir`, recursively, sorted.
pub fn scripts_under(dir: &Path) -> std::io::Result<Vec<std::path::PathBuf>> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d)? {
            let p = entry?.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|e| e == "pkt") {
                out.push(p);
            }
        }
    }
    out.sort();
    Ok(out)
}
