//! Builds the kernels twice:
//! - host: every `kernels/host/*.cpp` (which include the shared `.cuh` math) with the system
//!   C++ compiler into a static library, so the CPU backend and CI run the exact source the
//!   GPU runs;
//! - device: see `compile_device_kernels` (nvcc → embedded fatbin, NVRTC fallback).

use std::path::{Path, PathBuf};
use std::process::Command;

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
    let parts = cu_files(Path::new("kernels/host"), "h"); // parts of augment_host.cpp
    for h in cu_files(Path::new("kernels"), "cuh").iter().chain(&host).chain(&parts) {
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
        // No FP exception is ever looked at: lets the compiler evaluate both sides of a select
        // (kernels/host/augment_color.h's hue loop vectorizes only so). Values are unchanged:
        // value-changing rewrites need -ffast-math's other flags, which stay off.
        .flag_if_supported("-fno-trapping-math")
        .warnings(true)
        .include("kernels");
    for f in &host {
        b.file(f);
    }
    b.compile("stoke_host_kernels");
}

/// Real GPU architectures that get SASS, so A100 (8.0), A10/RTX 30 (8.6), L4/RTX 40 (8.9) and
/// H100/H200 (9.0) load the kernels without JIT; newer GPUs JIT the PTX of the last one.
const SASS_ARCHS: [&str; 4] = ["80", "86", "89", "90"];
const PTX_ARCH: &str = "90";

/// The text of `kernels/<name>` with every local `#include "x.cuh"` replaced by that file's
/// text (each file once, as `#pragma once` would), so NVRTC needs no include path for our
/// own headers. `#line` keeps compiler messages pointing at the original files.
fn inline_includes(dir: &Path, name: &str, seen: &mut Vec<String>, out: &mut String) {
    if seen.iter().any(|s| s == name) {
        return;
    }
    seen.push(name.to_string());
    let path = dir.join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    out.push_str(&format!("// ---- {name}\n#line 1 \"kernels/{name}\"\n"));
    for (i, line) in text.lines().enumerate() {
        let t = line.trim();
        if t == "#pragma once" {
            out.push('\n');
            continue;
        }
        let local = t
            .strip_prefix("#include")
            .map(str::trim)
            .and_then(|r| r.strip_prefix('"'))
            .and_then(|r| r.split('"').next())
            .filter(|inc| dir.join(inc).is_file());
        match local {
            Some(inc) => {
                inline_includes(dir, inc, seen, out);
                out.push_str(&format!("#line {} \"kernels/{name}\"\n", i + 2));
            }
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
}

/// nvcc to use: `$NVCC`, `$CUDA_HOME/bin/nvcc`, the pinned one `scripts/setup-cuda.sh`
/// installs into `./.venv-cuda`, then `nvcc` on `PATH`. Returns the candidates tried too.
fn find_nvcc(root: &Path) -> (Option<(PathBuf, String)>, Vec<String>) {
    let mut cands: Vec<PathBuf> = Vec::new();
    if let Some(p) = std::env::var_os("NVCC") {
        cands.push(p.into());
    }
    if let Some(p) = std::env::var_os("CUDA_HOME") {
        cands.push(Path::new(&p).join("bin/nvcc"));
    }
    if let Ok(rd) = std::fs::read_dir(root.join(".venv-cuda/lib")) {
        let mut v: Vec<PathBuf> = rd.flatten().map(|e| e.path().join("site-packages/nvidia/cu13/bin/nvcc")).collect();
        v.sort();
        cands.extend(v);
    }
    cands.push("nvcc".into());
    let tried = cands.iter().map(|p| p.display().to_string()).collect();
    for c in cands {
        if let Ok(out) = Command::new(&c).arg("--version").output() {
            if out.status.success() {
                let text = String::from_utf8_lossy(&out.stdout);
                let release = text.lines().find(|l| l.contains("release")).unwrap_or("").trim().to_string();
                return (Some((c, release)), tried);
            }
        }
    }
    (None, tried)
}

fn compile_device_kernels() {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    let dir = root.join("kernels");
    for v in ["NVCC", "CUDA_HOME", "STOKE_REQUIRE_NVCC"] {
        println!("cargo:rerun-if-env-changed={v}");
    }
    println!("cargo:rerun-if-changed=kernels");
    let require = std::env::var("STOKE_REQUIRE_NVCC").is_ok_and(|v| v == "1");

    // One translation unit: every kernels/*.cu, local headers inlined once. nvcc and NVRTC
    // compile this same text.
    let cu: Vec<String> = cu_files(&dir, "cu").iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
    let mut source = String::from("// Generated by build.rs: every kernels/*.cu with local includes inlined.\n");
    let mut seen = Vec::new();
    for f in &cu {
        inline_includes(&dir, f, &mut seen, &mut source);
    }
    let src_path = out.join("stoke_kernels.cu");
    std::fs::write(&src_path, &source).unwrap();

    let fatbin = out.join("stoke_kernels.fatbin");
    let report = out.join("ptxas-report.txt");
    let _ = std::fs::remove_file(&fatbin);
    let _ = std::fs::remove_file(&report);
    let mut built: Option<String> = None;
    match find_nvcc(&root) {
        (Some((nvcc, release)), _) => {
            let mut cmd = Command::new(&nvcc);
            cmd.arg("-fatbin").args(["-O3", "-std=c++17", "-fmad=false", "-Xptxas", "-v", "-lineinfo"]).arg("-I").arg(&dir);
            for a in SASS_ARCHS {
                cmd.arg(format!("--generate-code=arch=compute_{a},code=sm_{a}"));
            }
            cmd.arg(format!("--generate-code=arch=compute_{PTX_ARCH},code=compute_{PTX_ARCH}"));
            cmd.arg("-o").arg(&fatbin).arg(&src_path);
            match cmd.output() {
                Ok(o) if o.status.success() => {
                    let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
                    std::fs::write(&report, format!("# {}\n# {release}\n{text}", nvcc.display())).unwrap();
                    built = Some(release);
                }
                Ok(o) => {
                    let msg = format!("nvcc ({}) failed to compile the kernels:\n{}", nvcc.display(), String::from_utf8_lossy(&o.stderr));
                    if require {
                        panic!("STOKE_REQUIRE_NVCC=1: {msg}");
                    }
                    for l in msg.lines().take(30) {
                        println!("cargo:warning={l}");
                    }
                    println!("cargo:warning=embedding the kernel sources for run-time NVRTC compilation instead");
                }
                Err(e) => {
                    if require {
                        panic!("STOKE_REQUIRE_NVCC=1: running {} failed: {e}", nvcc.display());
                    }
                    println!("cargo:warning=running {} failed: {e}; embedding the kernel sources for NVRTC", nvcc.display());
                }
            }
        }
        (None, tried) => {
            if require {
                panic!(
                    "STOKE_REQUIRE_NVCC=1 but no working nvcc was found (tried {}); run scripts/setup-cuda.sh or set NVCC",
                    tried.join(", ")
                );
            }
            println!(
                "cargo:warning=no nvcc found (tried {}): the CUDA kernels will be compiled at run time with NVRTC; run scripts/setup-cuda.sh to precompile them",
                tried.join(", ")
            );
        }
    }

    let archs: Vec<String> = SASS_ARCHS.iter().map(|a| format!("\"sm_{a}\"")).collect();
    let files: Vec<String> = cu.iter().map(|f| format!("{f:?}")).collect();
    let gen = match &built {
        Some(release) => format!(
            "pub const FATBIN: Option<&[u8]> = Some(include_bytes!({:?}));\n\
             pub const SASS_ARCHS: &[&str] = &[{}];\n\
             pub const PTX_ARCH: Option<&str> = Some(\"compute_{PTX_ARCH}\");\n\
             pub const NVCC_RELEASE: Option<&str> = Some({release:?});\n",
            fatbin.display().to_string(),
            archs.join(", ")
        ),
        None => "pub const FATBIN: Option<&[u8]> = None;\n\
                 pub const SASS_ARCHS: &[&str] = &[];\n\
                 pub const PTX_ARCH: Option<&str> = None;\n\
                 pub const NVCC_RELEASE: Option<&str> = None;\n"
            .to_string(),
    };
    let gen = format!(
        "{gen}pub const SOURCE: &str = include_str!({:?});\npub const KERNEL_FILES: &[&str] = &[{}];\n",
        src_path.display().to_string(),
        files.join(", ")
    );
    std::fs::write(out.join("stoke_kernels.rs"), gen).unwrap();
}

/// Whether turbojpeg-sys built libjpeg-turbo with its SIMD code (nasm was found): its
/// installed `jconfig.h` defines `WITH_SIMD` then. turbojpeg-sys declares `links = "turbojpeg"`,
/// so its build runs first and passes its include folders as `DEP_TURBOJPEG_INCLUDE`. Sets the
/// cfg `stoke_jpeg_simd`, under which the decoder asks libjpeg-turbo's own dispatch at run time
/// (`backend::cpu::decode::jpeg_simd`); without SIMD those functions do not exist.
fn detect_jpeg_simd() {
    println!("cargo::rustc-check-cfg=cfg(stoke_jpeg_simd)");
    let includes = std::env::var("DEP_TURBOJPEG_INCLUDE").unwrap_or_default();
    let simd = includes.split(',').filter(|d| !d.is_empty()).any(|d| {
        let h = Path::new(d).join("jconfig.h");
        println!("cargo:rerun-if-changed={}", h.display());
        std::fs::read_to_string(&h).is_ok_and(|t| t.lines().any(|l| l.trim() == "#define WITH_SIMD 1"))
    });
    if simd {
        println!("cargo:rustc-cfg=stoke_jpeg_simd");
    } else {
        println!("cargo:warning=libjpeg-turbo was built without SIMD (nasm missing): JPEG decoding runs about 1.5x slower; scripts/setup.sh --rebuild-jpeg fixes it");
    }
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    compile_host_kernels();
    compile_device_kernels();
    detect_jpeg_simd();
}
