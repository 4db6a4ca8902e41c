//! rocsd.toml: the daemon's own settings. Every key is optional, but an empty file is
//! refused (a failed copy is likelier than a choice): a file of comments runs on the
//! defaults.
//!
//! ```toml
//! socket = "/run/rocs/rocsd.sock"   # the control socket
//! socket_mode = 0o660               # its file mode; group `socket_group` when it exists
//! socket_group = "rocs"
//! platform = "linux"                # or "sim"
//! policy_dir = "/etc/rocs/policy.d" # relative paths are relative to this file
//! scan_interval_ms = 250            # how often /proc is scanned for targets
//! window_ms = 100                   # measurement window on linux
//! restore_on_exit = true            # move confined pages back when rocsd stops
//! allow_observe_only = false        # run without a PMU (software events only)
//! prefetchers_off_while_profiling = false  # L2 prefetchers off while a target profiles
//!                                   # (Intel and AMD, through /dev/cpu/N/msr)
//! pmu = "auto"                      # or "replay:FILE": scripted samples and counters (tests)
//! client_timeout_ms = 10000         # a control client must send a line within this
//! metrics = "9477"                  # Prometheus metrics on 127.0.0.1:9477 (a port alone
//!                                   # is loopback; "0.0.0.0:9477" any address); absent = off
//! [knobs]                           # defaults for every policy
//! [geometry]                        # override the detected LLC geometry
//! [sim]                             # the simulated platform: machine, window_cycles,
//!                                   # pause_ms, cpu_share, seed, [[sim.workload]] name/seed/scale
//! ```

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;

use crate::error::{read_text, ConfigError, Location, Source};
use crate::knobs::{KnobTable, RawKnobs};

pub const DEFAULT_CONFIG: &str = "/etc/rocs/rocsd.toml";
pub const DEFAULT_SOCKET: &str = "/run/rocs/rocsd.sock";
pub const DEFAULT_POLICY_DIR: &str = "/etc/rocs/policy.d";

/// Which machine rocsd drives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Platform {
    /// This machine: perf events and the kernel shim.
    Linux,
    /// Simulated machines running built-in workloads (the demo).
    Sim,
}

impl std::str::FromStr for Platform {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "linux" => Ok(Platform::Linux),
            "sim" => Ok(Platform::Sim),
            _ => Err(format!("unknown platform {s:?}: use \"linux\" or \"sim\"")),
        }
    }
}

impl std::fmt::Display for Platform {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Platform::Linux => "linux",
            Platform::Sim => "sim",
        })
    }
}

/// Where rocsd's samples and counters come from on linux.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum PmuChoice {
    /// The hardware PMU (perf events), or software stand-ins with `allow_observe_only`.
    #[default]
    Auto,
    /// A replay PMU script (rocs-linux's `replay`): the samples and counters it plays, for
    /// testing the rest of the real path on a machine without a PMU. Never chosen unless
    /// named.
    Replay(PathBuf),
}

impl std::fmt::Display for PmuChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PmuChoice::Auto => f.write_str("auto"),
            PmuChoice::Replay(file) => write!(f, "replay:{}", file.display()),
        }
    }
}

/// An LLC geometry given by hand, for machines whose detection is wrong or missing.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GeometryOverride {
    pub line_size: u64,
    pub ways: u64,
    /// Sets in one slice; or give `size` (all slices, bytes) instead.
    pub sets_per_slice: Option<u64>,
    pub size: Option<u64>,
    #[serde(default = "one")]
    pub slices: u64,
    #[serde(default = "page_4k")]
    pub page_size: u64,
}

fn one() -> u64 {
    1
}
fn page_4k() -> u64 {
    4096
}

/// One simulated workload of the sim platform.
#[derive(Clone, Debug, PartialEq)]
pub struct SimWorkload {
    /// A rocs-sim built-in workload name (or a workload file path).
    pub name: String,
    /// Where the name was written, to report an unknown workload.
    pub at: Location,
    /// Seed of this workload's machine (default: the [sim] seed plus its index).
    pub seed: Option<u64>,
    /// Multiplies the workload's phase lengths (tests run shortened workloads).
    pub scale: Option<f64>,
}

/// The sim platform's settings.
#[derive(Clone, Debug, PartialEq)]
pub struct SimConfig {
    /// A rocs-sim machine spec (a built-in name or a TOML file).
    pub machine: String,
    pub machine_at: Option<Location>,
    /// Cycles simulated per window.
    pub window_cycles: u64,
    /// Shortest wall-clock pause between windows.
    pub pause_ms: u64,
    /// Largest share of one core each simulated machine may use: after a window that took
    /// `t` to simulate, the machine rests `t * (1 / cpu_share - 1)` (at least `pause_ms`),
    /// so that the demo never takes whole cores.
    pub cpu_share: f64,
    pub seed: u64,
    pub workloads: Vec<SimWorkload>,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            machine: "ppc970fx".into(),
            machine_at: None,
            window_cycles: 100_000_000,
            pause_ms: 10,
            cpu_share: 0.25,
            seed: 1,
            workloads: Vec::new(),
        }
    }
}

/// rocsd.toml, with every default filled in and relative paths made absolute.
#[derive(Clone, Debug, PartialEq)]
pub struct DaemonConfig {
    /// The file this came from (`None`: built-in defaults).
    pub file: Option<PathBuf>,
    pub socket: PathBuf,
    pub socket_mode: u32,
    pub socket_group: String,
    pub platform: Platform,
    pub policy_dir: PathBuf,
    pub scan_interval_ms: u64,
    pub window_ms: u64,
    pub restore_on_exit: bool,
    pub allow_observe_only: bool,
    /// Switch the L2 prefetchers of a target's LLC domain off while it profiles, as ROCS
    /// profiled (rocs_linux::prefetch); refused at start where that cannot be done.
    pub prefetchers_off_while_profiling: bool,
    pub pmu: PmuChoice,
    pub client_timeout_ms: u64,
    pub metrics: Option<SocketAddr>,
    /// Default knobs for every policy.
    pub knobs: KnobTable,
    pub geometry: Option<GeometryOverride>,
    pub geometry_at: Option<Location>,
    pub sim: SimConfig,
}

impl Default for DaemonConfig {
    fn default() -> Self {
        DaemonConfig {
            file: None,
            socket: DEFAULT_SOCKET.into(),
            socket_mode: 0o660,
            socket_group: "rocs".into(),
            platform: Platform::Linux,
            policy_dir: DEFAULT_POLICY_DIR.into(),
            scan_interval_ms: 250,
            window_ms: 100,
            restore_on_exit: true,
            allow_observe_only: false,
            prefetchers_off_while_profiling: false,
            pmu: PmuChoice::Auto,
            client_timeout_ms: 10_000,
            metrics: None,
            knobs: KnobTable::new(),
            geometry: None,
            geometry_at: None,
            sim: SimConfig::default(),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    socket: Option<PathBuf>,
    socket_mode: Option<Spanned<u32>>,
    socket_group: Option<String>,
    platform: Option<Platform>,
    policy_dir: Option<PathBuf>,
    scan_interval_ms: Option<Spanned<u64>>,
    window_ms: Option<Spanned<u64>>,
    restore_on_exit: Option<bool>,
    allow_observe_only: Option<bool>,
    prefetchers_off_while_profiling: Option<bool>,
    pmu: Option<Spanned<String>>,
    client_timeout_ms: Option<Spanned<u64>>,
    metrics: Option<Spanned<String>>,
    #[serde(default)]
    knobs: RawKnobs,
    geometry: Option<Spanned<GeometryOverride>>,
    sim: Option<RawSim>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSim {
    machine: Option<Spanned<String>>,
    window_cycles: Option<Spanned<u64>>,
    pause_ms: Option<u64>,
    cpu_share: Option<Spanned<f64>>,
    seed: Option<u64>,
    #[serde(default)]
    workload: Vec<RawSimWorkload>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSimWorkload {
    name: Spanned<String>,
    seed: Option<u64>,
    scale: Option<Spanned<f64>>,
}

/// Where to serve metrics: a port alone means loopback (the metrics name the machine's
/// workloads, so exposing them beyond it is a choice to write out); an address is taken as is.
fn metrics_address(text: &str) -> Option<SocketAddr> {
    match text.parse::<u16>() {
        Ok(port) => Some(SocketAddr::from((std::net::Ipv4Addr::LOCALHOST, port))),
        Err(_) => text.parse().ok(),
    }
}

impl Source<'_> {
    /// A path written in rocsd.toml: relative paths are taken from the file's folder.
    fn absolute(&self, path: PathBuf) -> PathBuf {
        if path.is_absolute() {
            path
        } else {
            self.file.parent().unwrap_or(Path::new(".")).join(path)
        }
    }
}

impl DaemonConfig {
    /// Read rocsd.toml from `file` (through the same reader as policies, so that a binary
    /// file is reported at its first bad byte).
    pub fn load(file: &Path) -> Result<Self, ConfigError> {
        Self::parse(file, &read_text(file)?)
    }

    /// Parse rocsd.toml text read from `file`; relative paths are taken from `file`'s folder.
    pub fn parse(file: &Path, text: &str) -> Result<Self, ConfigError> {
        if text.trim().is_empty() {
            // Every key is optional, but an empty file is more often a failed copy or a
            // truncated write than a choice: say so rather than run on the defaults.
            return Err(ConfigError::at(
                Location::of_offset(file, text, 0),
                "rocsd.toml is empty: write the settings to change (config/rocsd.toml lists \
                 them all), or only a comment such as `# built-in defaults` to run with the \
                 defaults",
            ));
        }
        let raw: RawConfig =
            toml::from_str(text).map_err(|e| ConfigError::from_toml(file, text, &e))?;
        let src = Source { file, text };
        let mut c = DaemonConfig {
            file: Some(file.to_path_buf()),
            ..DaemonConfig::default()
        };
        if let Some(s) = raw.socket {
            c.socket = src.absolute(s);
        }
        if let Some(m) = raw.socket_mode {
            c.socket_mode = socket_mode(&src, m)?;
        }
        if let Some(g) = raw.socket_group {
            c.socket_group = g;
        }
        if let Some(p) = raw.platform {
            c.platform = p;
        }
        if let Some(d) = raw.policy_dir {
            c.policy_dir = src.absolute(d);
        }
        c.set_intervals(
            &src,
            raw.scan_interval_ms,
            raw.window_ms,
            raw.client_timeout_ms,
        )?;
        if let Some(r) = raw.restore_on_exit {
            c.restore_on_exit = r;
        }
        if let Some(o) = raw.allow_observe_only {
            c.allow_observe_only = o;
        }
        if let Some(p) = raw.prefetchers_off_while_profiling {
            c.prefetchers_off_while_profiling = p;
        }
        if let Some(p) = raw.pmu {
            c.pmu = pmu_choice(&src, p)?;
        }
        if let Some(m) = raw.metrics {
            c.metrics = Some(metrics_setting(&src, m)?);
        }
        if let Some(k) = raw.knobs.0 {
            let span = k.span();
            c.knobs = KnobTable::from_spanned(file, text, Some(span), k.into_inner());
        }
        if let Some(g) = raw.geometry {
            c.set_geometry(&src, g)?;
        }
        if let Some(s) = raw.sim {
            c.sim.apply(&src, s)?;
        }
        Ok(c)
    }

    /// scan_interval_ms, window_ms and client_timeout_ms, each within its bounds.
    fn set_intervals(
        &mut self,
        src: &Source,
        scan_interval_ms: Option<Spanned<u64>>,
        window_ms: Option<Spanned<u64>>,
        client_timeout_ms: Option<Spanned<u64>>,
    ) -> Result<(), ConfigError> {
        for (name, field, value) in [
            (
                "scan_interval_ms",
                &mut self.scan_interval_ms,
                scan_interval_ms,
            ),
            ("window_ms", &mut self.window_ms, window_ms),
        ] {
            if let Some(v) = value {
                // Targets must be noticed within a second; a window must be measurable.
                if !(10..=1000).contains(v.get_ref()) {
                    return Err(ConfigError::at(
                        src.at(v.span()),
                        format!("{name} = {} must be between 10 and 1000", v.get_ref()),
                    ));
                }
                *field = v.into_inner();
            }
        }
        if let Some(t) = client_timeout_ms {
            if !(100..=600_000).contains(t.get_ref()) {
                return Err(ConfigError::at(
                    src.at(t.span()),
                    format!(
                        "client_timeout_ms = {} must be between 100 and 600000",
                        t.get_ref()
                    ),
                ));
            }
            self.client_timeout_ms = t.into_inner();
        }
        Ok(())
    }

    /// [geometry]: exactly one of sets_per_slice and size, and a geometry that exists.
    fn set_geometry(
        &mut self,
        src: &Source,
        geometry: Spanned<GeometryOverride>,
    ) -> Result<(), ConfigError> {
        let loc = src.at(geometry.span());
        let g = geometry.into_inner();
        if g.sets_per_slice.is_some() == g.size.is_some() {
            return Err(ConfigError::at(
                loc,
                "[geometry] needs exactly one of sets_per_slice and size",
            ));
        }
        self.geometry = Some(g);
        self.geometry_at = Some(loc.clone());
        if let Err(e) = self.geometry() {
            return Err(ConfigError::at(loc, e.to_string()));
        }
        Ok(())
    }

    /// The overriding geometry, checked.
    pub fn geometry(&self) -> Result<Option<rocs_core::CacheGeometry>, rocs_core::GeometryError> {
        let Some(g) = &self.geometry else {
            return Ok(None);
        };
        let geo = match (g.sets_per_slice, g.size) {
            (Some(sets), _) => {
                rocs_core::CacheGeometry::new(g.line_size, sets, g.ways, g.slices, g.page_size)?
            }
            (None, Some(size)) => rocs_core::CacheGeometry::from_size(
                size,
                g.line_size,
                g.ways,
                g.slices,
                g.page_size,
            )?,
            (None, None) => return Ok(None),
        };
        Ok(Some(geo))
    }
}

fn socket_mode(src: &Source, mode: Spanned<u32>) -> Result<u32, ConfigError> {
    if *mode.get_ref() > 0o777 {
        return Err(ConfigError::at(
            src.at(mode.span()),
            format!(
                "socket_mode {:#o} is not a file mode (write it as 0o660)",
                mode.get_ref()
            ),
        ));
    }
    Ok(mode.into_inner())
}

fn pmu_choice(src: &Source, pmu: Spanned<String>) -> Result<PmuChoice, ConfigError> {
    match pmu.get_ref().as_str() {
        "auto" => Ok(PmuChoice::Auto),
        v => match v.strip_prefix("replay:") {
            Some(f) if !f.is_empty() => Ok(PmuChoice::Replay(src.absolute(f.into()))),
            _ => Err(ConfigError::at(
                src.at(pmu.span()),
                format!(
                    "pmu = {v:?}: use \"auto\" (the hardware PMU), or \"replay:FILE\" to play a \
                     script of samples and counters (tests only)"
                ),
            )),
        },
    }
}

fn metrics_setting(src: &Source, metrics: Spanned<String>) -> Result<SocketAddr, ConfigError> {
    metrics_address(metrics.get_ref()).ok_or_else(|| {
        ConfigError::at(
            src.at(metrics.span()),
            format!(
                "metrics {:?} is neither a port (\"9477\", on loopback) nor an address \
                 (\"127.0.0.1:9477\", \"0.0.0.0:9477\", \"[::]:9477\")",
                metrics.get_ref()
            ),
        )
    })
}

impl SimConfig {
    /// Overlay the [sim] table on these settings.
    fn apply(&mut self, src: &Source, sim: RawSim) -> Result<(), ConfigError> {
        if let Some(m) = sim.machine {
            self.machine_at = Some(src.at(m.span()));
            self.machine = m.into_inner();
        }
        if let Some(w) = sim.window_cycles {
            if *w.get_ref() < 10_000 {
                return Err(ConfigError::at(
                    src.at(w.span()),
                    "window_cycles must be at least 10000",
                ));
            }
            self.window_cycles = w.into_inner();
        }
        if let Some(p) = sim.pause_ms {
            self.pause_ms = p;
        }
        if let Some(f) = sim.cpu_share {
            if !(*f.get_ref() > 0.0 && *f.get_ref() <= 1.0) {
                return Err(ConfigError::at(
                    src.at(f.span()),
                    format!("cpu_share {} must be in (0, 1]", f.get_ref()),
                ));
            }
            self.cpu_share = f.into_inner();
        }
        if let Some(seed) = sim.seed {
            self.seed = seed;
        }
        self.workloads = sim
            .workload
            .into_iter()
            .map(|w| sim_workload(src, w))
            .collect::<Result<_, _>>()?;
        Ok(())
    }
}

fn sim_workload(src: &Source, w: RawSimWorkload) -> Result<SimWorkload, ConfigError> {
    let scale = match w.scale {
        Some(f) if !(*f.get_ref() > 0.0 && f.get_ref().is_finite()) => {
            return Err(ConfigError::at(
                src.at(f.span()),
                format!("scale {} must be a positive number", f.get_ref()),
            ))
        }
        f => f.map(|f| f.into_inner()),
    };
    Ok(SimWorkload {
        at: src.at(w.name.span()),
        name: w.name.into_inner(),
        seed: w.seed,
        scale,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_when_only_comments() {
        let c = DaemonConfig::parse(Path::new("/etc/rocs/rocsd.toml"), "# built-in defaults\n")
            .unwrap();
        assert_eq!(c.socket, PathBuf::from(DEFAULT_SOCKET));
        assert_eq!(c.platform, Platform::Linux);
        assert_eq!(c.metrics, None, "metrics are off unless asked for");
        assert!(c.restore_on_exit);
        assert!(!c.allow_observe_only);
        assert!(
            !c.prefetchers_off_while_profiling,
            "the machine's prefetchers are not touched unless asked"
        );
        assert_eq!(c.pmu, PmuChoice::Auto, "never a replay unless named");
    }

    #[test]
    fn empty_and_binary_files_are_reported_with_a_place_and_what_to_do() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("rocsd.toml");
        for empty in ["", "\n  \n\t\n"] {
            std::fs::write(&file, empty).unwrap();
            let e = DaemonConfig::load(&file).unwrap_err().to_string();
            assert_eq!(
                e.find(":1:1: rocsd.toml is empty"),
                Some(file.display().to_string().len()),
                "{empty:?}: {e}"
            );
            assert!(e.contains("config/rocsd.toml lists them all"), "{e}");
        }
        // A binary copied over rocsd.toml: reported at its first bad byte, on line 2.
        std::fs::write(&file, b"\x7fELF\x02\x01\x01\0\0\0\n\x80").unwrap();
        let e = DaemonConfig::load(&file).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!(
                "{}:2:1: not UTF-8 text (byte 0x80",
                file.display()
            )),
            "{e}"
        );
        assert!(
            e.contains("a rocs configuration is a TOML text file"),
            "{e}"
        );
        // And a file that is missing names itself.
        let missing = dir.path().join("missing.toml");
        let e = DaemonConfig::load(&missing).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("{}: cannot read", missing.display())),
            "{e}"
        );
    }

    #[test]
    fn a_replay_pmu_is_named_with_its_file() {
        let c = DaemonConfig::parse(Path::new("/vm/rocsd.toml"), "pmu = \"replay:t.replay\"\n")
            .unwrap();
        assert_eq!(c.pmu, PmuChoice::Replay("/vm/t.replay".into()));
        assert_eq!(c.pmu.to_string(), "replay:/vm/t.replay");
        let c = DaemonConfig::parse(Path::new("/vm/rocsd.toml"), "pmu = \"auto\"\n").unwrap();
        assert_eq!(c.pmu, PmuChoice::Auto);
    }

    #[test]
    fn full_file() {
        let text = r#"
socket = "run/rocsd.sock"
socket_mode = 0o600
platform = "sim"
policy_dir = "demo-policy.d"
metrics = "127.0.0.1:9477"
[knobs]
pollute_colours = 2
[geometry]
line_size = 64
ways = 16
size = 1048576
[sim]
machine = "small"
window_cycles = 500000
pause_ms = 5
[[sim.workload]]
name = "art-like"
[[sim.workload]]
name = "mcf-like"
seed = 7
scale = 0.5
"#;
        let c = DaemonConfig::parse(Path::new("/x/config/demo.toml"), text).unwrap();
        assert_eq!(c.socket, PathBuf::from("/x/config/run/rocsd.sock"));
        assert_eq!(c.policy_dir, PathBuf::from("/x/config/demo-policy.d"));
        assert_eq!(c.socket_mode, 0o600);
        assert_eq!(c.platform, Platform::Sim);
        assert_eq!(c.metrics.unwrap().port(), 9477);
        assert_eq!(c.knobs.keys().collect::<Vec<_>>(), vec!["pollute_colours"]);
        let g = c.geometry().unwrap().unwrap();
        assert_eq!(g.colours(), 16);
        assert_eq!(c.sim.workloads.len(), 2);
        assert_eq!(c.sim.workloads[1].seed, Some(7));
        assert_eq!(c.sim.workloads[1].at.line, 20);
        assert_eq!(c.sim.window_cycles, 500_000);
    }

    #[test]
    fn metrics_on_loopback_unless_an_address_is_given() {
        let metrics = |text: &str| {
            DaemonConfig::parse(Path::new("rocsd.toml"), text)
                .unwrap()
                .metrics
                .unwrap()
                .to_string()
        };
        assert_eq!(metrics("metrics = \"9477\""), "127.0.0.1:9477");
        assert_eq!(metrics("metrics = \"[::1]:9477\""), "[::1]:9477");
        assert_eq!(metrics("metrics = \"0.0.0.0:9100\""), "0.0.0.0:9100");
    }

    #[test]
    fn errors_are_placed() {
        let f = Path::new("rocsd.toml");
        let cases = [
            ("platform = \"windows\"\n", "rocsd.toml:1:12:"),
            ("metrics = \"localhost\"\n", "rocsd.toml:1:11:"),
            ("\nscan_interval_ms = 5000\n", "rocsd.toml:2:20:"),
            ("sockett = \"/x\"\n", "rocsd.toml:1:1:"),
            (
                "[geometry]\nline_size = 64\nways = 8\nsize = 1000\n",
                "rocsd.toml:1:1:",
            ),
            ("[geometry]\nline_size = 64\nways = 8\n", "rocsd.toml:1:1:"),
            ("socket_mode = 0o7777\n", "rocsd.toml:1:15:"),
            ("\npmu = \"replay\"\n", "rocsd.toml:2:7:"),
            ("pmu = \"replay:\"\n", "rocsd.toml:1:7:"),
            ("pmu = \"ibs\"\n", "rocsd.toml:1:7:"),
            (
                "[[sim.workload]]\nname = \"x\"\nscale = -1.0\n",
                "rocsd.toml:3:9:",
            ),
        ];
        for (text, want) in cases {
            let e = DaemonConfig::parse(f, text).unwrap_err().to_string();
            assert!(e.starts_with(want), "{text:?}: {e}");
        }
    }
}
