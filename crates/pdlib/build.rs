//! Compiles the C trampoline for packetdrill's two C-variadic callbacks (`fcntl`,
//! `ioctl`): stable Rust cannot define a variadic function.

fn main() {
    println!("cargo::rerun-if-changed=src/trampoline.c");
    cc::Build::new()
        .file("src/trampoline.c")
        .warnings(true)
        .compile("ustack_packetdrill_trampoline");
}
