//! The cluster flags of `argus build` (`--processes`, `--process-id`, `--hosts`): one timely
//! dataflow over several processes (docs/cluster.md).

use crate::cli::BuildArgs;
use anyhow::{bail, Context, Result};

/// Cluster flags of `argus build`: the number of processes and their addresses (one
/// `host:port` per line of `--hosts`, `#` comments and blank lines ignored).
pub fn cluster_hosts(args: &BuildArgs) -> Result<(usize, Vec<String>)> {
    if args.processes == 0 {
        bail!("--processes must be at least 1");
    }
    if args.process_id >= args.processes {
        bail!(
            "--process-id {} must be below --processes {}",
            args.process_id,
            args.processes
        );
    }
    let hosts = match &args.hosts {
        None if args.processes > 1 => bail!("--processes > 1 needs --hosts FILE"),
        None => Vec::new(),
        Some(file) => {
            let text = std::fs::read_to_string(file)
                .with_context(|| format!("reading hosts file {}", file.display()))?;
            let hosts: Vec<String> = text
                .lines()
                .map(|l| l.split('#').next().unwrap_or("").trim())
                .filter(|l| !l.is_empty())
                .map(str::to_string)
                .collect();
            if let Some(bad) = hosts.iter().find(|h| !h.contains(':')) {
                bail!("hosts file {}: {bad:?} is not host:port", file.display());
            }
            if hosts.len() != args.processes {
                bail!(
                    "hosts file {} lists {} addresses for --processes {}",
                    file.display(),
                    hosts.len(),
                    args.processes
                );
            }
            hosts
        }
    };
    Ok((
        args.processes,
        if args.processes > 1 {
            hosts
        } else {
            Vec::new()
        },
    ))
}
