//! `stoke doctor` as a user runs it: the binary, text and `--json`.
//!
//! On a machine without a GPU (CI, developers' machines) it must exit 0 and say plainly that
//! there is no GPU and the CPU backend will be used. On a GPU machine (the bundle's run.sh
//! sets `STOKE_REQUIRE_GPU=1`) it must report the device and the CUDA backend.
//!
//! The binary is `$STOKE_BIN` when set (the bundle carries it to another machine), else the
//! one cargo built.

use std::process::Command;

fn stoke() -> Command {
    Command::new(std::env::var_os("STOKE_BIN").unwrap_or_else(|| env!("CARGO_BIN_EXE_stoke").into()))
}

fn require_gpu() -> bool {
    std::env::var("STOKE_REQUIRE_GPU").is_ok_and(|v| v == "1")
}

#[test]
fn doctor_json_is_one_object_that_names_the_backend() {
    let out = stoke().args(["doctor", "--json"]).output().expect("run stoke");
    assert!(out.status.success(), "exit {:?}: {}", out.status, String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is one JSON object");
    for key in ["stoke_version", "driver", "devices", "nvjpeg", "kernels", "backend"] {
        assert!(v.get(key).is_some(), "missing {key}: {v}");
    }
    let kind = v["backend"]["kind"].as_str().unwrap();
    if v["driver"]["available"] == false {
        assert_eq!(kind, "cpu");
        assert_eq!(v["devices"].as_array().unwrap().len(), 0);
        assert!(v["driver"]["error"].as_str().unwrap().contains("NVIDIA driver"), "{v}");
        assert!(!require_gpu(), "STOKE_REQUIRE_GPU=1 but doctor found no driver: {v}");
    } else if require_gpu() {
        assert_eq!(kind, "cuda", "{v}");
        let d = &v["devices"][0];
        assert!(d["multiprocessors"].as_i64().unwrap() > 0 && d["total_memory"].as_u64().unwrap() > 0, "{d}");
    }
    // The build facts do not depend on the machine.
    let k = &v["kernels"];
    assert_eq!(k["precompiled"] == true, k["sass"].as_array().unwrap().len() == 4, "{k}");
    assert!(k["files"].as_array().unwrap().iter().any(|f| f == "augment.cu"), "{k}");
}

#[test]
fn doctor_text_without_a_gpu_says_so_and_exits_0() {
    let out = stoke().arg("doctor").output().expect("run stoke");
    assert!(out.status.success(), "exit {:?}: {}", out.status, String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    for field in ["NVIDIA driver :", "libnvjpeg     :", "kernels       :", "backend       :"] {
        assert!(text.contains(field), "no {field:?} line:\n{text}");
    }
    if text.contains("NVIDIA driver : none") {
        assert!(text.contains("GPUs          : none"), "{text}");
        assert!(text.contains("there is no GPU"), "{text}");
        assert!(text.contains("will use the CPU backend"), "{text}");
    }
}
