//! include/ustack.h is what cbindgen makes of src/ffi.rs: this test regenerates it and
//! fails on any difference (`USTACK_BLESS=1` rewrites the file instead).

use std::path::Path;

#[test]
fn the_checked_in_header_is_what_the_code_gives() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let bindings = cbindgen::Builder::new()
        .with_config(config)
        .with_src(dir.join("src/ffi.rs"))
        .generate()
        .expect("cbindgen");
    let mut now = Vec::new();
    bindings.write(&mut now);
    let path = dir.join("include/ustack.h");
    if std::env::var_os("USTACK_BLESS").is_some() {
        std::fs::write(&path, &now).expect("writing include/ustack.h");
        return;
    }
    let checked_in = std::fs::read(&path).unwrap_or_default();
    assert!(
        checked_in == now,
        "include/ustack.h is stale: run `USTACK_BLESS=1 cargo test -p ustack-capi --test header` \
         and commit it. The code gives:\n{}",
        String::from_utf8_lossy(&now)
    );
}
