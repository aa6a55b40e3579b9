//! Build script for tca-pmix.
//!
//! Without the `link` feature it does nothing: no libpmix, no C compiler. With it: finds the
//! PMIx client library with pkg-config (Debian: libpmix-dev, which Open MPI's
//! libopenmpi-dev pulls in) and compiles `csrc/shim.c`, whose few functions take and return
//! only integers and C strings, so the Rust side declares them by hand (`src/pmix.rs`).

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var_os("CARGO_FEATURE_LINK").is_none() {
        return;
    }
    println!("cargo:rerun-if-changed=csrc/shim.c");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");

    // Probe without emitting link lines yet: the static shim must come before -lpmix.
    let pmix = pkg_config::Config::new()
        .atleast_version("4")
        .cargo_metadata(false)
        .probe("pmix")
        .unwrap_or_else(|e| {
            panic!(
                "tca-pmix: feature `link` needs PMIx >= 4 found by pkg-config \
                 (Debian: apt-get install libpmix-dev): {e}"
            )
        });

    cc::Build::new()
        .file("csrc/shim.c")
        .includes(&pmix.include_paths)
        .warnings(true)
        .extra_warnings(true)
        .warnings_into_errors(true)
        .compile("tca_pmix_shim");

    for path in &pmix.link_paths {
        println!("cargo:rustc-link-search=native={}", path.display());
    }
    for lib in &pmix.libs {
        println!("cargo:rustc-link-lib={lib}");
    }
}
