//! The agdb version in Cargo.lock, for the module's AGDB_VERSION (the record's engine version).

fn main() {
    println!("cargo:rerun-if-changed=Cargo.lock");
    let lock = std::fs::read_to_string("Cargo.lock").unwrap_or_default();
    let mut version = "unknown".to_string();
    let mut lines = lock.lines();
    while let Some(line) = lines.next() {
        if line.trim() == "name = \"agdb\""
            && let Some(next) = lines.next()
            && let Some(v) = next.trim().strip_prefix("version = ")
        {
            version = v.trim_matches('"').to_string();
        }
    }
    println!("cargo:rustc-env=STOREBENCH_AGDB_VERSION={version}");
}
