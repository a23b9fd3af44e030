//! `stoke tune [DATASET]`: sweep the knobs that set throughput, print the table, pick the
//! smallest configuration within 5 % of the best, and write it as a JSON config file that
//! `stoke bench --config FILE` (and `PipelineConfig::merge_json_file`) accept.
//!
//! On the CPU backend the sweep is the decode/augment thread count (1, 2, 4, … up to the
//! cores, and the core count itself); on CUDA (`--backend cuda`) it is reader threads ×
//! CPU-route threads × prefetch depth. "Smallest" orders candidates by the resources they take
//! (threads first, then reader threads, then prefetch depth), so a user gets the cheapest
//! configuration that is as good as the best within measurement noise — the seed's advice
//! ("pick the smallest within 5 % of the best") as one command.

use crate::bench::{self, Measure};
use crate::pipeline_args::PipelineArgs;
use serde_json::{json, Map, Value};
use std::path::PathBuf;
use stoke::config::BackendKind;
use stoke::PipelineConfig;

/// One configuration to try: the config fields it sets, and its cost (compared
/// lexicographically; smaller is cheaper).
#[derive(Clone, Debug, PartialEq)]
pub struct Candidate {
    /// Pipeline config fields, as written to the output file.
    pub fields: Map<String, Value>,
    /// Resources it takes, most important first.
    pub cost: Vec<u64>,
}

/// The index of the cheapest trial whose throughput is within `tolerance` (0.05 = 5 %) of the
/// best; `None` when there is no trial with a positive throughput.
pub fn pick_smallest_within(trials: &[(Candidate, f64)], tolerance: f64) -> Option<usize> {
    let best = trials.iter().map(|t| t.1).fold(0.0f64, f64::max);
    if best <= 0.0 {
        return None;
    }
    trials.iter().enumerate().filter(|(_, t)| t.1 >= (1.0 - tolerance) * best).min_by(|a, b| a.1 .0.cost.cmp(&b.1 .0.cost)).map(|(i, _)| i)
}

/// 1, 2, 4, … below `cores`, then `cores` itself.
pub fn thread_counts(cores: usize) -> Vec<usize> {
    let mut v: Vec<usize> = std::iter::successors(Some(1usize), |t| Some(t * 2)).take_while(|&t| t < cores).collect();
    v.push(cores.max(1));
    v
}

/// The CPU sweep: thread counts, with the given reader threads and prefetch.
pub fn cpu_candidates(cores: usize, reader_threads: usize, prefetch: usize) -> Vec<Candidate> {
    thread_counts(cores)
        .into_iter()
        .map(|t| {
            let fields = json!({"cpu_threads": t, "reader_threads": reader_threads, "prefetch_batches": prefetch});
            Candidate { fields: fields.as_object().expect("object").clone(), cost: vec![t as u64, reader_threads as u64, prefetch as u64] }
        })
        .collect()
}

/// Options of `stoke tune`.
#[derive(clap::Args)]
pub struct Args {
    /// Dataset (default: the built-in ImageNet-like set, as `stoke bench`).
    pub dataset: Option<PathBuf>,
    #[command(flatten)]
    pub pipeline: PipelineArgs,
    /// Where to write the chosen configuration (JSON; `stoke bench --config FILE` reads it).
    #[arg(long, default_value = "stoke-tuned.json")]
    pub out: PathBuf,
    /// Measured batches per configuration.
    #[arg(long, default_value_t = 6)]
    pub batches: usize,
    /// Warm-up batches per configuration.
    #[arg(long, default_value_t = 2)]
    pub warmup_batches: usize,
    /// How close to the best a configuration must be to count (0.05 = 5 %).
    #[arg(long, default_value_t = 0.05)]
    pub tolerance: f64,
    /// Print the table as one JSON object.
    #[arg(long)]
    pub json: bool,
    /// Images in the built-in dataset (when no DATASET is given).
    #[arg(long, default_value_t = stoke::gen::DEFAULT_COUNT)]
    pub gen_count: usize,
}

/// The sweep for `config` on CUDA (`on_cuda`) or on the CPU.
fn candidates(config: &PipelineConfig, on_cuda: bool) -> Vec<Candidate> {
    match on_cuda {
        true => {
            // Reader threads, CPU-route decode threads (progressive/CMYK/... that nvJPEG's
            // GPU paths refuse) and prefetch depth, with the ring deep enough for the prefetch
            // to overlap (ring docs: ring_depth >= prefetch + 2). The hardware-engine batch
            // width and the hardware/CUDA split are chosen by the decoder from the GPU, not
            // config fields, so they are not swept. Cost: readers, CPU threads, prefetch.
            let mut v = Vec::new();
            for readers in [1usize, 2, 4] {
                for cpu in [1usize, 4] {
                    for prefetch in [2usize, 4] {
                        let fields = json!({"reader_threads": readers, "cpu_threads": cpu,
                            "prefetch_batches": prefetch, "ring_depth": prefetch + 2});
                        v.push(Candidate {
                            fields: fields.as_object().expect("object").clone(),
                            cost: vec![readers as u64, cpu as u64, prefetch as u64],
                        });
                    }
                }
            }
            v
        }
        false => {
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
            cpu_candidates(cores, config.reader_threads, config.prefetch_batches)
        }
    }
}

fn label(fields: &Map<String, Value>) -> String {
    fields.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ")
}

pub fn run(a: Args) -> stoke::Result<()> {
    if !(0.0..1.0).contains(&a.tolerance) {
        return Err(stoke::Error::config(format!("tolerance must be in [0, 1), got {}", a.tolerance)));
    }
    let dataset = bench::resolve_dataset(a.dataset.clone(), a.gen_count, a.json)?;
    let base = a.pipeline.to_config(dataset)?;
    let m = Measure {
        start_epoch: a.pipeline.epoch,
        epochs: u64::MAX / 2,
        warmup_batches: a.warmup_batches,
        batches: Some(a.batches.max(1)),
        seconds: None,
        windows: 1,
        consumer: None,
        // tune compares rates and reports no utilization: no NVML sampling beside them.
        gpu_util: false,
    };
    // `auto` runs on CUDA when a usable GPU is there, so sweep what that backend would run.
    let on_cuda = match base.backend {
        BackendKind::Cuda => true,
        BackendKind::Cpu => false,
        BackendKind::Auto => stoke::backend::cuda::open_for_pipeline(base.device).is_ok(),
    };
    let cands = candidates(&base, on_cuda);
    let mut trials: Vec<(Candidate, f64)> = Vec::new();
    let mut reports = Vec::new();
    for (i, cand) in cands.iter().enumerate() {
        let mut config = base.clone();
        let mut merged = serde_json::to_value(&config).expect("config serializes");
        for (k, v) in &cand.fields {
            merged[k] = v.clone();
        }
        config = serde_json::from_value(merged).expect("sweep fields are config fields");
        config.validate()?;
        let pb = bench::progress(None, a.json);
        pb.set_prefix(format!("{}/{}", i + 1, cands.len()));
        let r = bench::measure(config, &m, &pb)?;
        if !a.json {
            eprintln!("{:<55} {:>9.1} images/s  {:>5.2} cores", label(&cand.fields), r.images_per_sec, r.cpu_cores_used);
        }
        trials.push((cand.clone(), r.images_per_sec));
        reports.push(r);
    }
    let best_ips = trials.iter().map(|t| t.1).fold(0.0, f64::max);
    let pick = pick_smallest_within(&trials, a.tolerance).ok_or_else(|| stoke::Error::config("no configuration delivered any images"))?;
    let chosen = &trials[pick].0.fields;
    let text = serde_json::to_string_pretty(&Value::Object(chosen.clone())).expect("fields serialize") + "\n";
    std::fs::write(&a.out, text).map_err(|e| stoke::Error::io(&a.out, e))?;
    if a.json {
        let rows: Vec<Value> = trials
            .iter()
            .zip(&reports)
            .map(|((c, ips), r)| json!({"config": c.fields, "images_per_sec": ips, "cpu_cores_used": r.cpu_cores_used}))
            .collect();
        println!(
            "{}",
            json!({"backend": reports[pick].backend, "trials": rows, "best_images_per_sec": best_ips,
            "chosen": chosen, "tolerance": a.tolerance, "out": a.out})
        );
    } else {
        println!("{:<55} {:>12} {:>8} {:>8}", "configuration", "images/s", "of best", "cores");
        for (i, ((c, ips), r)) in trials.iter().zip(&reports).enumerate() {
            let mark = if i == pick { "  <- chosen" } else { "" };
            println!("{:<55} {:>12.1} {:>7.1}% {:>8.2}{mark}", label(&c.fields), ips, 100.0 * ips / best_ips, r.cpu_cores_used);
        }
        println!(
            "chose the smallest configuration within {:.0} % of the best ({:.1} images/s); wrote {}",
            a.tolerance * 100.0,
            best_ips,
            a.out.display()
        );
        println!("use it with: stoke bench --config {}", a.out.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cand(cost: &[u64]) -> Candidate {
        Candidate { fields: Map::new(), cost: cost.to_vec() }
    }

    #[test]
    fn picks_the_cheapest_within_five_percent() {
        let t = vec![(cand(&[1]), 100.0), (cand(&[2]), 190.0), (cand(&[4]), 200.0), (cand(&[8]), 199.0)];
        // 190 >= 0.95 * 200: two threads are enough.
        assert_eq!(pick_smallest_within(&t, 0.05), Some(1));
        // With 1 % tolerance only 4 and 8 qualify; 4 is cheaper.
        assert_eq!(pick_smallest_within(&t, 0.01), Some(2));
        // Order of the list does not matter, only cost.
        let mut r = t.clone();
        r.reverse();
        assert_eq!(r[pick_smallest_within(&r, 0.05).unwrap()].0.cost, vec![2]);
        assert_eq!(pick_smallest_within(&[], 0.05), None);
        assert_eq!(pick_smallest_within(&[(cand(&[1]), 0.0)], 0.05), None);
        // Cost compares lexicographically: fewer threads beat fewer readers.
        let t = vec![(cand(&[2, 1]), 100.0), (cand(&[1, 4]), 99.0)];
        assert_eq!(pick_smallest_within(&t, 0.05), Some(1));
    }

    #[test]
    fn cuda_sweep_keeps_the_ring_deeper_than_the_prefetch() {
        let c = candidates(&PipelineConfig::new("x"), true);
        assert_eq!(c.len(), 12);
        for cand in &c {
            let f = &cand.fields;
            assert_eq!(f["ring_depth"].as_u64().unwrap(), f["prefetch_batches"].as_u64().unwrap() + 2);
            let mut cfg = PipelineConfig::new("x");
            let mut v = serde_json::to_value(&cfg).unwrap();
            for (k, x) in f {
                v[k] = x.clone();
            }
            cfg = serde_json::from_value(v).unwrap();
            cfg.validate().unwrap();
        }
        assert_eq!(pick_smallest_within(&c.iter().map(|c| (c.clone(), 1.0)).collect::<Vec<_>>(), 0.05), Some(0));
    }

    #[test]
    fn thread_sweep_is_powers_of_two_then_the_cores() {
        assert_eq!(thread_counts(1), vec![1]);
        assert_eq!(thread_counts(2), vec![1, 2]);
        assert_eq!(thread_counts(12), vec![1, 2, 4, 8, 12]);
        assert_eq!(thread_counts(16), vec![1, 2, 4, 8, 16]);
        let c = cpu_candidates(4, 2, 3);
        assert_eq!(c.len(), 3);
        assert_eq!(c[2].fields["cpu_threads"], 4);
        assert_eq!(c[2].fields["reader_threads"], 2);
        assert_eq!(c[2].cost, vec![4, 2, 3]);
    }
}
