//! `argus build`: its flags into an [`argus_engine::build::BuildConfig`] (the cluster flags in
//! `build_cluster.rs`), then the engine's build.

use crate::cli::BuildArgs;
use anyhow::{bail, Result};
pub use argus_engine::build::{build, serve_cluster, BuildConfig};
use argus_pipeline::dataflow::DataflowConfig;

/// The build `args` ask for.
pub fn config(args: &BuildArgs) -> Result<BuildConfig> {
    if !(args.threshold.is_finite() && args.threshold > 0.0) {
        bail!("--threshold must be a positive number of seconds");
    }
    if args.workers == 0 {
        bail!("--workers must be at least 1");
    }
    let (processes, hosts) = super::build_cluster::cluster_hosts(args)?;
    let rules =
        argus_engine::setup::user_rules((args.threshold * 1e9) as u64, args.rules.as_deref())?;
    Ok(BuildConfig {
        traces: args.traces.clone(),
        output: args.output.clone(),
        batch: args.batch.max(1),
        dataflow: DataflowConfig {
            rules,
            workers: args.workers,
            processes,
            process_id: args.process_id,
            hosts,
            // A build keeps every rule state: its graph is the whole trace's.
            forget: None,
            forget_limit: Default::default(),
        },
        last: args.last,
        stats: args.stats,
    })
}
