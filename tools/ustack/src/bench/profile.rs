//! `--profile`: where the ustack server's shard loop spends its time, per message, from
//! the sampled profiler built into the runtime ([`ustack_obs::profile`]): switched on for
//! the ustack server's run only, read when it ends, and set beside the server's CPU time
//! per message measured on its threads' clocks, so that the reader (and the CLI test) can
//! see that the stages add up to it.

use std::io::Write;

use anyhow::Context;
use serde_json::json;
use ustack_obs::profile;
use ustack_runtime::control::profile_json;

use super::{Args, Outcome};

/// Run `f` (a ustack server's scenario) with the profiler on if `on`, and put what it
/// sampled in the outcome's `profile`.
/// `every`: sample one loop iteration in so many (`None`: the profiler stays off).
pub(super) fn around(
    every: Option<u64>,
    f: impl FnOnce() -> anyhow::Result<Outcome>,
) -> anyhow::Result<Outcome> {
    let Some(every) = every else {
        return f();
    };
    profile::reset();
    profile::set_sample_every(every);
    profile::set_enabled(true);
    let result = f();
    profile::set_enabled(false);
    let mut o = result.inspect_err(|_| profile::set_sample_every(profile::SAMPLE_EVERY))?;
    let snap = profile::snapshot();
    // Per message for the echo scenarios (per connection for cps); per packet received
    // (the sample's packets scaled to the whole run) for stream.
    let (units, unit) = match o.scenario {
        "stream" if snap.sampled > 0 => (
            snap.packets as f64 * snap.iterations as f64 / snap.sampled as f64,
            "packet",
        ),
        "cps" => (o.count as f64, "connection"),
        _ => (o.count as f64, "message"),
    };
    let mut v = profile_json(&snap, units, unit);
    profile::set_sample_every(profile::SAMPLE_EVERY);
    let measured = o
        .server_cpu
        .filter(|_| units > 0.0)
        .map(|cpu| cpu.as_nanos() as f64 / units);
    v["measured_cpu_ns"] = json!(measured);
    v["instructions"] =
        json!("n/a: no hardware counters (perf_event_open's PMU) are read; see docs/bench.md");
    o.profile = v;
    Ok(o)
}

/// After the comparison: each profile as a table (unless --json, which carries them),
/// and `--profile-folded`'s file.
pub(super) fn report(outcomes: &[Outcome], args: &Args) -> anyhow::Result<()> {
    let profiled: Vec<&Outcome> = outcomes.iter().filter(|o| !o.profile.is_null()).collect();
    if !args.json {
        for o in &profiled {
            let p = &o.profile;
            println!(
                "\nprofile of the ustack server, {} ({} conns): ns per {} by stage, \
                 one loop iteration in {} sampled",
                o.scenario,
                o.conns,
                p["unit"].as_str().unwrap_or("message"),
                p["sample_every"]
            );
            print!("{}", p["table"].as_str().unwrap_or_default());
            if let Some(m) = p["measured_cpu_ns"].as_f64() {
                println!("measured: the server threads' CPU time per unit is {m:.1} ns");
            }
        }
    }
    if let Some(path) = &args.profile_folded {
        let folded: String = profiled
            .iter()
            .filter_map(|o| o.profile["folded"].as_str())
            .flat_map(|f| f.lines().map(|l| format!("ustack;{l}\n")))
            .collect();
        let mut file = std::fs::File::create(path)
            .with_context(|| format!("--profile-folded {}", path.display()))?;
        file.write_all(folded.as_bytes())?;
        if !args.json {
            println!("folded stacks: {}", path.display());
        }
    }
    Ok(())
}
