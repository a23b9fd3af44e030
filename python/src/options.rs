//! `stoke.Loader`'s keywords: which there are, and the pipeline config they make (through
//! `stoke::config::PipelineOptions`, the CLI's own path, so both spell and check them alike).

use super::*;

/// Every keyword `Loader` takes.
const OPTIONS: &[&str] = &[
    "device",
    "preset",
    "size",
    "resolution",
    "crop_ratio",
    "dtype",
    "layout",
    "seed",
    "epoch",
    "shuffle",
    "drop_last",
    "on_error",
    "rank",
    "world_size",
    "threads",
    "reader_threads",
    "store_in_flight",
    "image_column",
    "label_column",
    "prefetch",
    "epoch_ahead",
    "decoders",
    "gpu_upsampling",
    "gpu_wait",
    "gpu_bitstream",
    "gpu_engine_gray",
    "gpu_engine_lanes",
    "gpu_engine_ahead",
    "transcode_progressive",
    "transcode_cache_bytes",
    "gpu_hybrid_share",
    "decode_only",
    "gpu_memory_budget",
    "exif",
    "dct_scaling",
    "filter",
    "antialias",
    "hflip",
    "vflip",
    "rotate",
    "rotate_interp",
    "fill",
    "scale",
    "ratio",
    "mean",
    "std",
    "class_balanced",
    "class_weights",
    "epoch_length",
    "max_held_batches",
    "mixup",
    "cutmix",
    "cutmix_minmax",
    "mixup_prob",
    "mixup_switch_prob",
    "mixup_mode",
    "smoothing",
    "num_classes",
    "aa",
    "color_jitter",
    "color_jitter_prob",
    "grayscale_prob",
    "reprob",
    "remode",
    "recount",
    "train_interpolation",
    "affine_degrees",
    "affine_translate",
    "affine_scale",
    "affine_shear",
    "views",
    "blur_prob",
    "blur_sigma",
    "blur_kernel",
    "solarize_prob",
    "solarize_threshold",
    "config",
    "stream",
    "stream_group",
    "read_ahead_bytes",
    "cache_dir",
    "cache_limit",
];

/// Options as the CLI has them, under the same names (Python spelling).
pub(crate) fn build_config(source: PathBuf, batch_size: usize, o: &Bound<'_, PyDict>) -> PyResult<(PipelineConfig, usize, u64)> {
    let bad = |name: &str, v: String, want: &str| PyValueError::new_err(format!("{name}={v}: {want}"));
    let get = |name: &str| -> PyResult<Option<Bound<'_, PyAny>>> { o.get_item(name).map(|v| v.filter(|v| !v.is_none())) };
    macro_rules! opt {
        ($name:expr, $t:ty) => {
            match get($name)? {
                None => None,
                Some(v) => Some(v.extract::<$t>().map_err(|_| {
                    PyTypeError::new_err(format!(
                        "{}={}: expected {}",
                        $name,
                        v.repr().map(|r| r.to_string()).unwrap_or_default(),
                        stringify!($t)
                    ))
                })?),
            }
        };
    }
    for k in o.keys() {
        let k: String = k.extract()?;
        if !OPTIONS.contains(&k.as_str()) {
            return Err(PyTypeError::new_err(format!(
                "Loader() got an unexpected keyword argument {k:?} (options: {})",
                OPTIONS.join(", ")
            )));
        }
    }
    // Names → values only: what each option means is `PipelineOptions::to_config`'s.
    let choice = |name: &str, default: &str, table: &[(&str, u8)]| -> PyResult<u8> {
        let v = opt!(name, String).unwrap_or_else(|| default.to_string());
        table.iter().find(|(n, _)| *n == v).map(|(_, k)| *k).ok_or_else(|| {
            let names: Vec<String> = table.iter().map(|(n, _)| format!("'{n}'")).collect();
            bad(name, format!("{v:?}"), &format!("expected one of {}", names.join(", ")))
        })
    };
    let mut o = PipelineOptions { batch_size: Some(batch_size), ..PipelineOptions::default() };
    o.preset = [Preset::Train, Preset::Eval, Preset::Deit, Preset::Dino, Preset::Dinov2, Preset::Simclr, Preset::Mae][choice(
        "preset",
        "train",
        &[("train", 0), ("eval", 1), ("deit", 2), ("dino", 3), ("dinov2", 4), ("simclr", 5), ("mae", 6)],
    )? as usize];
    let device = opt!("device", String).unwrap_or_else(|| "auto".into());
    (o.backend, o.device) = match device.as_str() {
        "auto" => (Some(BackendKind::Auto), None),
        "cuda" => (Some(BackendKind::Cuda), None),
        "cpu" => (Some(BackendKind::Cpu), None),
        d => match d.strip_prefix("cuda:").and_then(|n| n.parse::<usize>().ok()) {
            Some(n) => (Some(BackendKind::Cuda), Some(n)),
            None => return Err(bad("device", format!("{d:?}"), "expected 'auto', 'cuda', 'cuda:N' or 'cpu'")),
        },
    };
    o.dtype = Some(
        [DType::F32, DType::F32, DType::F16, DType::F16, DType::Bf16, DType::Bf16, DType::U8, DType::U8][choice(
            "dtype",
            "float32",
            &[("float32", 0), ("f32", 1), ("float16", 2), ("f16", 3), ("bfloat16", 4), ("bf16", 5), ("uint8", 6), ("u8", 7)],
        )? as usize],
    );
    o.layout = Some([Layout::Nchw, Layout::Nhwc][choice("layout", "nchw", &[("nchw", 0), ("nhwc", 1)])? as usize]);
    o.on_error = Some([OnError::Skip, OnError::Fail][choice("on_error", "skip", &[("skip", 0), ("fail", 1)])? as usize]);
    o.decoders = Some(
        [GpuDecoders::All, GpuDecoders::Hw, GpuDecoders::Cuda][choice("decoders", "all", &[("all", 0), ("hw", 1), ("cuda", 2)])? as usize],
    );
    o.gpu_upsampling = Some(
        [GpuUpsampling::Smooth, GpuUpsampling::Nearest][choice("gpu_upsampling", "nearest", &[("smooth", 0), ("nearest", 1)])? as usize],
    );
    o.gpu_wait = Some([GpuWait::Auto, GpuWait::Block][choice("gpu_wait", "auto", &[("auto", 0), ("block", 1)])? as usize]);
    o.gpu_bitstream =
        Some([GpuBitstream::Host, GpuBitstream::Device][choice("gpu_bitstream", "host", &[("host", 0), ("device", 1)])? as usize]);
    o.gpu_engine_gray = opt!("gpu_engine_gray", bool);
    o.gpu_engine_lanes = opt!("gpu_engine_lanes", usize);
    o.gpu_engine_ahead = opt!("gpu_engine_ahead", bool);
    o.transcode_progressive = opt!("transcode_progressive", bool);
    o.transcode_cache_bytes = opt!("transcode_cache_bytes", u64);
    if let Some(v) = get("gpu_hybrid_share")? {
        // "off", "auto", or a fraction in (0, 1] as a number or a string.
        let text = match v.extract::<f64>() {
            Ok(f) => f.to_string(),
            Err(_) => v.extract::<String>().map_err(|_| PyTypeError::new_err("gpu_hybrid_share must be 'off', 'auto' or a number"))?,
        };
        o.gpu_hybrid_share =
            Some(text.parse::<stoke::config::HybridShare>().map_err(|e| PyValueError::new_err(format!("gpu_hybrid_share: {e}")))?);
    }
    if get("filter")?.is_some() {
        o.filter = Some([Filter::Bilinear, Filter::Bicubic][choice("filter", "", &[("bilinear", 0), ("bicubic", 1)])? as usize]);
    }
    if get("rotate_interp")?.is_some() {
        o.rotate_interp = Some(
            [RotateInterp::Nearest, RotateInterp::Bilinear][choice("rotate_interp", "", &[("nearest", 0), ("bilinear", 1)])? as usize],
        );
    }
    o.size = opt!("size", u32);
    o.crop_ratio = opt!("crop_ratio", f64);
    if let Some(v) = get("resolution")? {
        // FFCV's section as a dict, or the four numbers in its order.
        let want = "expected a dict {'min_res', 'max_res', 'start_ramp', 'end_ramp'} or a tuple (min_res, max_res, start_ramp, end_ramp) of integers >= 0";
        let shown = || v.repr().map(|r| r.to_string()).unwrap_or_default();
        let (min_res, max_res, start_ramp, end_ramp) = match v.downcast::<PyDict>() {
            Ok(d) => {
                let keys = ["min_res", "max_res", "start_ramp", "end_ramp"];
                for k in d.keys() {
                    let k: String = k.extract()?;
                    if !keys.contains(&k.as_str()) {
                        return Err(PyValueError::new_err(format!("resolution={}: unknown key {k:?}; {want}", shown())));
                    }
                }
                let mut n = [0u64; 4];
                for (slot, k) in n.iter_mut().zip(keys) {
                    let x = d.get_item(k)?.ok_or_else(|| PyValueError::new_err(format!("resolution={}: no {k:?}; {want}", shown())))?;
                    *slot = x.extract().map_err(|_| PyTypeError::new_err(format!("resolution={}: {want}", shown())))?;
                }
                (n[0], n[1], n[2], n[3])
            }
            Err(_) => v.extract::<(u64, u64, u64, u64)>().map_err(|_| PyTypeError::new_err(format!("resolution={}: {want}", shown())))?,
        };
        let side =
            |x: u64| u32::try_from(x).map_err(|_| PyValueError::new_err(format!("resolution={}: a size of {x} is out of range", shown())));
        o.resolution = Some(stoke::config::ResolutionSchedule { min_res: side(min_res)?, max_res: side(max_res)?, start_ramp, end_ramp });
    }
    o.seed = opt!("seed", u64);
    o.no_shuffle = !opt!("shuffle", bool).unwrap_or(true);
    o.drop_last = opt!("drop_last", bool).unwrap_or(false);
    (o.rank, o.world_size) = (opt!("rank", usize), opt!("world_size", usize));
    o.threads = opt!("threads", usize);
    o.reader_threads = opt!("reader_threads", usize);
    o.store_in_flight = opt!("store_in_flight", usize);
    o.image_column = opt!("image_column", String);
    o.label_column = opt!("label_column", String);
    o.prefetch = opt!("prefetch", usize);
    o.no_epoch_ahead = !opt!("epoch_ahead", bool).unwrap_or(true);
    o.gpu_memory_budget = opt!("gpu_memory_budget", u64);
    o.decode_only = opt!("decode_only", bool).unwrap_or(false);
    o.no_exif = !opt!("exif", bool).unwrap_or(true);
    o.dct_scaling = opt!("dct_scaling", bool).unwrap_or(false);
    o.no_antialias = !opt!("antialias", bool).unwrap_or(true);
    o.hflip = opt!("hflip", f64);
    o.vflip = opt!("vflip", f64);
    o.rotate = opt!("rotate", (f32, f32));
    o.fill = opt!("fill", [f32; 3]);
    o.scale = opt!("scale", (f64, f64));
    o.ratio = opt!("ratio", (f64, f64));
    o.mean = opt!("mean", [f32; 3]);
    o.std = opt!("std", [f32; 3]);
    o.class_balanced = opt!("class_balanced", bool).unwrap_or(false);
    o.class_weights = opt!("class_weights", Vec<f64>);
    o.epoch_length = opt!("epoch_length", u64);
    let max_held = opt!("max_held_batches", usize).unwrap_or(8);
    if max_held == 0 {
        return Err(bad("max_held_batches", "0".into(), "must be at least 1"));
    }
    o.mixup = opt!("mixup", f64);
    o.cutmix = opt!("cutmix", f64);
    o.cutmix_minmax = opt!("cutmix_minmax", (f64, f64));
    o.mixup_prob = opt!("mixup_prob", f64);
    o.mixup_switch_prob = opt!("mixup_switch_prob", f64);
    if get("mixup_mode")?.is_some() {
        o.mixup_mode = Some(
            [MixupMode::Batch, MixupMode::Pair, MixupMode::Elem]
                [choice("mixup_mode", "", &[("batch", 0), ("pair", 1), ("elem", 2)])? as usize],
        );
    }
    o.smoothing = opt!("smoothing", f64);
    o.num_classes = opt!("num_classes", usize);
    let floats = |name: &str| -> PyResult<Option<Vec<f64>>> {
        Ok(match get(name)? {
            None => None,
            Some(v) => Some(match v.extract::<f64>() {
                Ok(x) => vec![x],
                Err(_) => opt!(name, Vec<f64>).unwrap_or_default(),
            }),
        })
    };
    o.aa = opt!("aa", String);
    o.color_jitter = floats("color_jitter")?;
    o.color_jitter_prob = opt!("color_jitter_prob", f64);
    o.grayscale_prob = opt!("grayscale_prob", f64);
    o.reprob = opt!("reprob", f64);
    if get("remode")?.is_some() {
        o.remode = Some(
            [EraseMode::Const, EraseMode::Rand, EraseMode::Pixel]
                [choice("remode", "", &[("const", 0), ("rand", 1), ("pixel", 2)])? as usize],
        );
    }
    o.recount = opt!("recount", u32);
    if get("train_interpolation")?.is_some() {
        o.train_interpolation = Some(
            [TrainInterpolation::Bilinear, TrainInterpolation::Bicubic, TrainInterpolation::Random]
                [choice("train_interpolation", "", &[("bilinear", 0), ("bicubic", 1), ("random", 2)])? as usize],
        );
    }
    o.affine_degrees = floats("affine_degrees")?;
    o.affine_shear = floats("affine_shear")?;
    o.affine_translate = opt!("affine_translate", (f64, f64));
    o.affine_scale = opt!("affine_scale", (f64, f64));
    o.blur_prob = opt!("blur_prob", f64);
    o.blur_sigma = opt!("blur_sigma", (f64, f64));
    o.blur_kernel = opt!("blur_kernel", u32);
    o.solarize_prob = opt!("solarize_prob", f64);
    o.solarize_threshold = opt!("solarize_threshold", f64);
    if let Some(v) = get("views")? {
        // A list of dicts, as JSON: the command line's `--views` text, parsed by the same code.
        let text: String = v
            .py()
            .import_bound("json")?
            .call_method1("dumps", (v,))
            .and_then(|t| t.extract())
            .map_err(|e| PyValueError::new_err(format!("views must be a list of dicts of numbers, lists and strings: {e}")))?;
        o.views = Some(ViewOptions::parse_list(&text, OptionNames::Python).map_err(|e| PyValueError::new_err(e.to_string()))?);
    }
    o.config = opt!("config", PathBuf);
    o.stream = opt!("stream", bool).unwrap_or(false);
    o.stream_group = opt!("stream_group", usize);
    o.read_ahead_bytes = opt!("read_ahead_bytes", u64);
    o.cache_dir = opt!("cache_dir", PathBuf);
    o.cache_limit = opt!("cache_limit", u64);
    let mut c = o.to_config(source, OptionNames::Python).map_err(|e| PyValueError::new_err(e.to_string()))?;
    // Room for every batch the consumer may hold, the prefetched ones and the one being made
    // (a config file's ring_depth gives way to this: the held-batch bound depends on it).
    c.ring_depth = max_held + c.prefetch_batches + 2;
    let epoch = opt!("epoch", u64).unwrap_or(0);
    c.validate().map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok((c, max_held, epoch))
}
