//! C test programs: [`compile_c`] builds one with the C compiler (`$CC`, else `cc`) and the
//! flags every C test here uses.

use std::ffi::OsStr;
use std::path::Path;
use std::process::Command;

/// Compile `src` into `exe`: `$CC -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -O1 -g src
/// -o exe extra...` (`extra` after the source: include directories, libraries). Panics
/// with the reason if the compiler is missing or fails.
pub fn compile_c<S: AsRef<OsStr>>(src: &Path, exe: &Path, extra: &[S]) {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(&cc)
        .args([
            "-std=c11",
            "-D_GNU_SOURCE",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-O1",
            "-g",
        ])
        .arg(src)
        .arg("-o")
        .arg(exe)
        .args(extra)
        .status()
        .unwrap_or_else(|e| panic!("running {cc} (gcc is needed for these tests): {e}"));
    assert!(status.success(), "{cc} failed on {}", src.display());
}
