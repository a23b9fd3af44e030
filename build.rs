//! Builds the kernels twice:
//! - host: every `kernels/host/*.cpp` (which include the shared `.cuh` math) with the system
//!   C++ compiler into a static library, so the CPU backend and CI run the exact source the
//!   GPU runs;
//! - device: see `compile_device_kernels` (nvcc → embedded fatbin, NVRTC fallback).

use std::path::{Path, PathBuf};

fn cu_files(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == ext))
        .collect();
    v.sort();
    v
}

fn compile_host_kernels() {
    let host = cu_files(Path::new("kernels/host"), "cpp");
    for h in cu_files(Path::new("kernels"), "cuh").iter().chain(&host) {
        println!("cargo:rerun-if-changed={}", h.display());
    }
    let mut b = cc::Build::new();
    b.cpp(true)
        .std("c++17")
        .opt_level(3)
        // Bit agreement with the device build (-fmad=false): no contraction into FMA, no
        // fast-math reassociation.
        .flag_if_supported("-ffp-contract=off")
        .flag_if_supported("-fno-fast-math")
        .warnings(true)
        .include("kernels");
    for f in &host {
        b.file(f);
    }
    b.compile("stoke_host_kernels");
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    compile_host_kernels();
}
