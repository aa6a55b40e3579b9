//! Build script for tca-ofi.
//!
//! Without the `link` feature it does nothing: no libfabric, no C compiler, no libclang.
//! With it: finds libfabric with pkg-config, compiles `csrc/shim.c` (real symbols for the
//! `static inline` libfabric API) and generates Rust declarations for `csrc/shim.h` with
//! bindgen into `$OUT_DIR/bindings.rs`.

use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if env::var_os("CARGO_FEATURE_LINK").is_none() {
        return;
    }
    println!("cargo:rerun-if-changed=csrc/shim.c");
    println!("cargo:rerun-if-changed=csrc/shim.h");

    // Probe without emitting link lines yet: the static shim must come before -lfabric.
    let fabric = pkg_config::Config::new()
        .atleast_version("1.17")
        .cargo_metadata(false)
        .probe("libfabric")
        .unwrap_or_else(|e| {
            panic!(
                "tca-ofi: feature `link` needs libfabric >= 1.17 found by pkg-config \
                 (Debian: apt-get install libfabric-dev): {e}"
            )
        });

    cc::Build::new()
        .file("csrc/shim.c")
        .includes(&fabric.include_paths)
        .warnings(true)
        .extra_warnings(true)
        .warnings_into_errors(true)
        .compile("tca_ofi_shim");

    for path in &fabric.link_paths {
        println!("cargo:rustc-link-search=native={}", path.display());
    }
    for lib in &fabric.libs {
        println!("cargo:rustc-link-lib={lib}");
    }
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");

    let flags = [
        // Bit flags, capability and order masks are uint64_t in the API.
        "FI_MSG|FI_RMA|FI_READ|FI_WRITE|FI_REMOTE_READ|FI_REMOTE_WRITE|FI_SEND|FI_RECV",
        "FI_TRANSMIT|FI_REMOTE_CQ_DATA|FI_SOURCE",
        "FI_CONTEXT|FI_CONTEXT2|FI_RX_CQ_DATA",
        "FI_MR_LOCAL|FI_MR_VIRT_ADDR|FI_MR_ALLOCATED|FI_MR_PROV_KEY|FI_MR_ENDPOINT",
        "FI_ORDER_NONE|FI_ORDER_SAW|FI_ORDER_WAW|FI_ORDER_SAS",
    ]
    .join("|");

    let bindings = bindgen::Builder::default()
        .header("csrc/shim.h")
        .clang_args(
            fabric
                .include_paths
                .iter()
                .map(|p| format!("-I{}", p.display())),
        )
        .rust_edition(bindgen::RustEdition::Edition2024)
        .allowlist_function("tca_fi_.*")
        .allowlist_type("fi_info|fi_cq_data_entry|fi_cq_err_entry|fi_context2")
        .allowlist_type("fi_cq_attr|fi_av_attr|tca_fi_const")
        .allowlist_var(format!("({flags})"))
        // The fid objects are only ever handled by pointer; never expose their ops tables.
        .opaque_type("fid|fid_.*")
        .prepend_enum_name(false)
        .default_enum_style(bindgen::EnumVariation::Consts)
        .parse_callbacks(Box::new(U64Flags))
        .derive_default(true)
        .generate()
        .expect("tca-ofi: bindgen failed on csrc/shim.h");
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR")).join("bindings.rs");
    bindings
        .write_to_file(&out)
        .expect("tca-ofi: writing bindings.rs");
}

/// Gives every `FI_*` macro constant the type `u64` (bindgen would pick `u32` for small
/// values), matching the `uint64_t` fields and arguments they are used with.
#[derive(Debug)]
struct U64Flags;

impl bindgen::callbacks::ParseCallbacks for U64Flags {
    fn int_macro(&self, name: &str, _value: i64) -> Option<bindgen::callbacks::IntKind> {
        name.starts_with("FI_")
            .then_some(bindgen::callbacks::IntKind::U64)
    }
}
