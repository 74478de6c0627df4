//! The client's end of the control socket (`ustack stat`, `ss`, `sysctl`, `capture`);
//! the server's end, shared with libustack_preload.so, is `ustack_runtime::control`.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;

use anyhow::{Context, bail};
use serde_json::Value;
pub use ustack_runtime::control::{ControlServer, SHARD_TIMEOUT, TAP_QUEUE, path, path_for_pid};

// ---- the client's end -------------------------------------------------------------------

/// Connect to the instance at `path`, with an error that says what to do if none runs.
pub fn connect(path: &Path) -> anyhow::Result<UnixStream> {
    UnixStream::connect(path).with_context(|| {
        let others = others(path);
        format!(
            "no running `ustack serve` answers on {} (start one, or pass --control PATH{})",
            path.display(),
            if others.is_empty() {
                String::new()
            } else {
                format!("; other instances' sockets: {}", others.join(", "))
            }
        )
    })
}

/// The `serve-<pid>.sock` sockets beside `default`, for an error message.
fn others(default: &Path) -> Vec<String> {
    let Some(dir) = default.parent() else {
        return Vec::new();
    };
    let mut found: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("serve-") && n.ends_with(".sock"))
        })
        .map(|p| p.display().to_string())
        .collect();
    found.sort();
    found
}

/// Send `req` to the instance at `path` and return its JSON answer; an `{"error": ...}`
/// answer is an error.
pub fn request(path: &Path, req: &Value) -> anyhow::Result<Value> {
    let mut stream = connect(path)?;
    stream.set_read_timeout(Some(SHARD_TIMEOUT * 2))?;
    let mut line = serde_json::to_string(req)?;
    line.push('\n');
    stream.write_all(line.as_bytes())?;
    let mut answer = String::new();
    BufReader::new(stream).read_line(&mut answer)?;
    let v: Value = serde_json::from_str(&answer)
        .with_context(|| format!("a malformed answer from {}", path.display()))?;
    if let Some(e) = v["error"].as_str() {
        bail!("{e}");
    }
    Ok(v)
}
