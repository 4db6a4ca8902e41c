//! rocsd: placeholder until the daemon lands.
fn main() {
    eprintln!("rocsd: not built yet");
    std::process::exit(2);
}
