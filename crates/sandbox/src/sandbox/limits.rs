//! Resource limits of a sandboxed run, beyond wall time and output: how
//! many processes, how much memory, how large a file, how much CPU, how
//! many open files, how much the disk may fill, how large `/tmp` may grow.
//!
//! Defaults live here ([`ResourceLimits::default`]); `config.toml` replaces
//! them (`[sandbox_limits]`), and a skill tool may override some for its own
//! runs (`:LIMITS: processes=512 file_size=1G cpu=120`, parsed by
//! [`LimitOverrides::parse`]). How each is enforced is described in
//! [`super::enforce`].

use serde::{Deserialize, Deserializer, Serialize};

/// The limits every sandboxed run is held to. `None` means "not limited".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ResourceLimits {
    /// Processes (and threads) alive at once in the run.
    pub processes: Option<u64>,
    /// Memory of the whole command, in bytes: all its processes together,
    /// in a memory cgroup of the run's own; where none can be made, the
    /// address space of each process (RLIMIT_AS) instead, and the sandbox's
    /// status line says so (see [`super::enforce`]).
    #[serde(deserialize_with = "size_opt")]
    pub memory: Option<u64>,
    /// Largest file any process may write, in bytes (RLIMIT_FSIZE).
    #[serde(deserialize_with = "size_opt")]
    pub file_size: Option<u64>,
    /// CPU seconds per process (RLIMIT_CPU).
    pub cpu_secs: Option<u64>,
    /// Open files per process (RLIMIT_NOFILE).
    pub open_files: Option<u64>,
    /// Bytes the run may write to the disk, wherever it writes (the
    /// transaction's upper layer, the session `/tmp`, its `HOME`, each
    /// writable path), counted by the blocks its files take.
    #[serde(deserialize_with = "size_opt")]
    pub disk_write: Option<u64>,
    /// Size of the private `/tmp`, in bytes.
    #[serde(deserialize_with = "size_opt")]
    pub tmp_size: Option<u64>,
}

const MIB: u64 = 1024 * 1024;
const GIB: u64 = 1024 * MIB;

impl Default for ResourceLimits {
    /// 256 processes, 4 GiB of memory for the command (per process where
    /// it falls back to RLIMIT_AS: OpenJDK 17 does not start under 2 GiB
    /// of address space, its compressed class space alone reserves 1 GiB;
    /// at 4 GiB it sizes itself to fit), 256 MiB per file, 120 CPU
    /// seconds, 1024 open files,
    /// 1 GiB of disk, 256 MiB of `/tmp`.
    fn default() -> Self {
        ResourceLimits {
            processes: Some(256),
            memory: Some(4 * GIB),
            file_size: Some(256 * MIB),
            cpu_secs: Some(120),
            open_files: Some(1024),
            disk_write: Some(GIB),
            tmp_size: Some(256 * MIB),
        }
    }
}

impl ResourceLimits {
    /// No limit at all (for tests and benchmarks that measure the cost).
    pub fn none() -> Self {
        ResourceLimits {
            processes: None,
            memory: None,
            file_size: None,
            cpu_secs: None,
            open_files: None,
            disk_write: None,
            tmp_size: None,
        }
    }

    /// These limits with a tool's overrides applied.
    pub fn with(mut self, o: &LimitOverrides) -> Self {
        let pick = |ours: &mut Option<u64>, theirs: Option<u64>| {
            if theirs.is_some() {
                *ours = theirs;
            }
        };
        pick(&mut self.processes, o.processes);
        pick(&mut self.memory, o.memory);
        pick(&mut self.file_size, o.file_size);
        pick(&mut self.cpu_secs, o.cpu_secs);
        pick(&mut self.open_files, o.open_files);
        pick(&mut self.disk_write, o.disk_write);
        pick(&mut self.tmp_size, o.tmp_size);
        self
    }
}

/// A skill tool's overrides: only the limits it names change.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LimitOverrides {
    pub processes: Option<u64>,
    pub memory: Option<u64>,
    pub file_size: Option<u64>,
    pub cpu_secs: Option<u64>,
    pub open_files: Option<u64>,
    pub disk_write: Option<u64>,
    pub tmp_size: Option<u64>,
}

impl LimitOverrides {
    /// The names `:LIMITS:` understands.
    pub const NAMES: &'static [&'static str] = &[
        "processes",
        "memory",
        "file_size",
        "cpu",
        "open_files",
        "disk_write",
        "tmp_size",
    ];

    /// Parse `processes=512 file_size=1G cpu=120`: space-separated
    /// `name=value` pairs; sizes take K, M, G (powers of 1024).
    pub fn parse(text: &str) -> Result<LimitOverrides, LimitError> {
        let mut o = LimitOverrides::default();
        for pair in text.split_whitespace() {
            let Some((name, value)) = pair.split_once('=') else {
                return Err(LimitError::NotNameValue(pair.to_string()));
            };
            let whole =
                || -> Result<u64, LimitError> {
                    value.parse::<u64>().ok().filter(|n| *n > 0).ok_or_else(|| {
                        LimitError::NotWhole {
                            name: name.to_string(),
                            value: value.to_string(),
                        }
                    })
                };
            match name {
                "processes" => o.processes = Some(whole()?),
                "cpu" => o.cpu_secs = Some(whole()?),
                "open_files" => o.open_files = Some(whole()?),
                "memory" => o.memory = Some(parse_size(value)?),
                "file_size" => o.file_size = Some(parse_size(value)?),
                "disk_write" => o.disk_write = Some(parse_size(value)?),
                "tmp_size" => o.tmp_size = Some(parse_size(value)?),
                other => {
                    return Err(LimitError::Unknown {
                        name: other.to_string(),
                        known: Self::NAMES.join(", "),
                    })
                }
            }
        }
        Ok(o)
    }
}

/// Why a `:LIMITS:` value or a size in the configuration was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    #[error("`{0}` is not name=value")]
    NotNameValue(String),
    #[error("`{name}` must be a whole number above 0, got `{value}`")]
    NotWhole { name: String, value: String },
    #[error("unknown limit `{name}`; known: {known}")]
    Unknown { name: String, known: String },
    #[error("`{0}` is not a size such as 4096, 512K, 64M or 1G")]
    NotSize(String),
    #[error("`{text}`: unknown unit `{unit}`; use K, M or G")]
    UnknownUnit { text: String, unit: String },
    #[error("`{0}`: a size must be above 0")]
    ZeroSize(String),
    #[error("`{0}` is too large")]
    TooLarge(String),
}

/// `4096`, `512K`, `64M`, `1G` (also `64MiB`, `1GB`: powers of 1024).
pub fn parse_size(text: &str) -> Result<u64, LimitError> {
    let t = text.trim();
    let digits = t.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let unit = &t[digits.len()..];
    let n: u64 = digits
        .parse()
        .map_err(|_| LimitError::NotSize(text.to_string()))?;
    let factor = match unit.to_ascii_uppercase().as_str() {
        "" | "B" => 1,
        "K" | "KB" | "KIB" => 1024,
        "M" | "MB" | "MIB" => MIB,
        "G" | "GB" | "GIB" => GIB,
        _ => {
            return Err(LimitError::UnknownUnit {
                text: text.to_string(),
                unit: unit.to_string(),
            })
        }
    };
    match n.checked_mul(factor) {
        Some(0) => Err(LimitError::ZeroSize(text.to_string())),
        Some(v) => Ok(v),
        None => Err(LimitError::TooLarge(text.to_string())),
    }
}

/// `256 MiB`, `1 GiB`, `512 KiB`, `100 bytes`.
pub fn format_size(n: u64) -> String {
    for (size, unit) in [(GIB, "GiB"), (MIB, "MiB"), (1024, "KiB")] {
        if n >= size && n.is_multiple_of(size) {
            return format!("{} {unit}", n / size);
        }
    }
    if n >= MIB {
        return format!("{:.1} MiB", n as f64 / MIB as f64);
    }
    format!("{n} bytes")
}

/// A size in config: a number of bytes or a string with a unit.
fn size_opt<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Size {
        Bytes(u64),
        Text(String),
    }
    match Option::<Size>::deserialize(d)? {
        None => Ok(None),
        Some(Size::Bytes(n)) => Ok(Some(n)),
        Some(Size::Text(t)) => parse_size(&t).map(Some).map_err(serde::de::Error::custom),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_take_binary_units() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("512K"), Ok(512 * 1024));
        assert_eq!(parse_size("64M"), Ok(64 * MIB));
        assert_eq!(parse_size("1G"), Ok(GIB));
        assert_eq!(parse_size("2GiB"), Ok(2 * GIB));
        assert!(parse_size("1T")
            .unwrap_err()
            .to_string()
            .contains("unknown unit"));
        assert!(parse_size("lots").is_err());
        assert!(parse_size("0M").is_err());
        assert_eq!(format_size(64 * MIB), "64 MiB");
        assert_eq!(format_size(GIB), "1 GiB");
        assert_eq!(format_size(100), "100 bytes");
    }

    #[test]
    fn overrides_parse_and_apply() {
        let o = LimitOverrides::parse("processes=512 file_size=1G cpu=120 memory=512M").unwrap();
        assert_eq!(
            o,
            LimitOverrides {
                processes: Some(512),
                memory: Some(512 * MIB),
                file_size: Some(GIB),
                cpu_secs: Some(120),
                ..LimitOverrides::default()
            }
        );
        let applied = ResourceLimits::default().with(&o);
        assert_eq!(applied.processes, Some(512));
        assert_eq!(applied.open_files, Some(1024));
        assert_eq!(applied.memory, Some(512 * MIB));
        assert_eq!(ResourceLimits::default().memory, Some(4 * GIB));
        assert_eq!(
            LimitOverrides::parse("forks=3").unwrap_err().to_string(),
            "unknown limit `forks`; known: processes, memory, file_size, cpu, open_files, \
             disk_write, tmp_size"
        );
        assert!(LimitOverrides::parse("processes").is_err());
        assert!(LimitOverrides::parse("processes=0").is_err());
    }

    #[test]
    fn config_tables_take_numbers_or_sizes() {
        let l: ResourceLimits =
            toml::from_str("processes = 64\nfile_size = \"1M\"\ndisk_write = 4096\n").unwrap();
        assert_eq!(l.processes, Some(64));
        assert_eq!(l.file_size, Some(MIB));
        assert_eq!(l.disk_write, Some(4096));
        // Unnamed limits keep their defaults.
        assert_eq!(l.cpu_secs, Some(120));
        assert!(toml::from_str::<ResourceLimits>("forks = 1").is_err());
    }
}
