//! The sandbox's `/etc`, built up from nothing.
//!
//! The host's `/etc` holds what programs need to run (the loader's cache,
//! TLS roots, the time zone, Debian's alternatives) next to what no command
//! of the agent has any business reading: TLS private keys
//! (`/etc/ssl/private`, readable to a daemon run as root, who stays their
//! owner inside), shadow files, sudoers, SSH host keys, service
//! configurations with passwords, the system's git settings. Masking the
//! secrets one by one misses the ones nobody listed, so the sandbox's
//! `/etc` holds only the entries of [`ETC_ENTRIES`], each with the reason
//! it is there; `passwd` and `group` are synthetic
//! ([`super::probe::synthetic_files`]) and `resolv.conf` is the sandbox's
//! own for a run granted network. `docs/sandbox.md` prints the same list.
//!
//! Each bind mount adds to every command's start, so the listed files are
//! copied into one directory of the daemon's ([`prepared`], kept current by
//! [`refresh`]) bound at `/etc`, with the listed directories bound into it.

use std::path::{Path, PathBuf};

/// One entry of the sandbox's `/etc`: a name relative to `/etc` (a trailing
/// `*` matches any rest of the last component: `python3*`) and why
/// programs need it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EtcEntry {
    pub name: &'static str,
    pub why: &'static str,
}

const fn e(name: &'static str, why: &'static str) -> EtcEntry {
    EtcEntry { name, why }
}

/// What the sandbox shows of the host's `/etc`, besides the synthetic
/// `passwd`/`group` and the resolver of a granted run. Everything else
/// under `/etc` is absent.
pub const ETC_ENTRIES: &[EtcEntry] = &[
    e(
        "ld.so.cache",
        "the dynamic loader finds shared libraries through it",
    ),
    e(
        "ld.so.conf",
        "the loader's library path list (read by ldconfig -p, some build tools)",
    ),
    e("ld.so.conf.d", "included by ld.so.conf"),
    e(
        "nsswitch.conf",
        "glibc looks up users, groups and hosts as it says",
    ),
    e("hosts", "`localhost` resolves to the loopback"),
    e("host.conf", "resolver options read by glibc"),
    e("gai.conf", "address order of getaddrinfo"),
    e("protocols", "getprotobyname (Python's socket, curl)"),
    e("services", "getservbyname: port names such as `https`"),
    e("networks", "getnetbyname, read by `ip` and `route`"),
    e(
        "ssl/certs",
        "TLS root certificates and the CA bundle (`ca-certificates.crt`)",
    ),
    e(
        "ssl/openssl.cnf",
        "OpenSSL's configuration, loaded by every program using it",
    ),
    e("pki/tls/certs", "the CA bundle on Fedora and RHEL"),
    e(
        "pki/tls/openssl.cnf",
        "OpenSSL's configuration on Fedora and RHEL",
    ),
    e(
        "pki/ca-trust/extracted",
        "the trust store the Fedora bundle links into",
    ),
    e(
        "ca-certificates",
        "Debian's extra trust anchors, linked from ssl/certs",
    ),
    e("localtime", "the time zone (`date`, logs, test timestamps)"),
    e("timezone", "the time zone's name (Debian)"),
    e(
        "os-release",
        "what the system is: build scripts and installers read it",
    ),
    e("lsb-release", "the same for older tools"),
    e(
        "debian_version",
        "the Debian release, read by some build scripts",
    ),
    e(
        "alternatives",
        "Debian's links behind `python`, `editor`, `awk`, `java`, `cc`",
    ),
    e("locale.alias", "locale names glibc accepts"),
    e("locale.conf", "the system locale (Arch, Fedora)"),
    e("default/locale", "the system locale (Debian)"),
    e("shells", "the list of login shells some tools check"),
    e("profile", "read by login shells (`bash -l`)"),
    e("bash.bashrc", "read by interactive bash"),
    e("inputrc", "readline settings"),
    e("terminfo", "local terminal descriptions"),
    e(
        "mime.types",
        "file types by extension (Python's mimetypes, web servers in tests)",
    ),
    e("magic", "`file`'s local rules"),
    e("magic.mime", "`file --mime`'s local rules"),
    e("mtab", "the mount table link `df` and `mount` read"),
    e(
        "python3*",
        "Debian's sitecustomize.py, which /usr/lib/python3.* links to",
    ),
    e(
        "perl",
        "Debian's Net::Config, which /usr/share/perl links to",
    ),
    e(
        "java-*",
        "the JDK's configuration, which /usr/lib/jvm links to on Debian",
    ),
    e("fonts", "fontconfig (documentation, plot and PDF builds)"),
    e("xml", "XML catalogs (xmllint, docbook)"),
    e("sgml", "SGML catalogs"),
    e("vim", "the system vimrc, for an editor the agent starts"),
    e(
        "ssh/ssh_config",
        "the ssh client's defaults, for git over ssh in a granted run",
    ),
    e("ssh/ssh_config.d", "included by ssh_config"),
];

/// Entries of the host's `/etc` the sandbox never shows, with the reason:
/// named so that the documentation and the tests can say why a
/// well-known file is missing (everything not in [`ETC_ENTRIES`] is
/// absent anyway).
pub const ETC_LEFT_OUT: &[EtcEntry] = &[
    e("ssl/private", "TLS private keys: readable to a daemon run as root"),
    e("shadow", "password hashes"),
    e("sudoers", "who may become root"),
    e("ssh/ssh_host_*_key", "the machine's SSH identity"),
    e("gitconfig", "system git settings (hooks, credential helpers, fsmonitor): git inside gets the person's identity only"),
    e("pip.conf", "an installer's settings may hold a registry's credentials"),
    e("npmrc", "an installer's settings may hold a registry's token"),
    e("machine-id", "an identifier of the machine, needed by nothing a command runs"),
];

/// One mount of the sandbox's `/etc`, probed on the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EtcItem {
    /// A directory of the daemon's bound at `/etc` first ([`prepared`]):
    /// copies of the listed files, the listed symlinks, and empty mount
    /// points for the listed directories and the synthetic files. One
    /// mount instead of one per file: each bind costs the spawn time.
    Base(PathBuf),
    /// A file or directory bound read-only: host source, sandbox path.
    Bind { source: PathBuf, dest: PathBuf },
    /// A symlink recreated as it is (`localtime -> /usr/share/zoneinfo/…`,
    /// `os-release -> ../usr/lib/os-release`).
    Symlink { dest: PathBuf, target: String },
}

/// The entries of [`ETC_ENTRIES`] that exist under `etc` (the host's
/// `/etc`, or a test tree), as mounts at `/etc/...`, sorted by path.
pub fn probe_etc(etc: &Path) -> Vec<EtcItem> {
    let mut out = Vec::new();
    for entry in ETC_ENTRIES {
        for rel in expand(etc, entry.name) {
            let source = etc.join(&rel);
            let dest = Path::new("/etc").join(&rel);
            let Ok(meta) = std::fs::symlink_metadata(&source) else {
                continue;
            };
            if meta.file_type().is_symlink() {
                if let Some(target) = std::fs::read_link(&source)
                    .ok()
                    .and_then(|t| t.to_str().map(str::to_string))
                {
                    out.push(EtcItem::Symlink { dest, target });
                }
            } else if meta.is_file() || meta.is_dir() {
                out.push(EtcItem::Bind { source, dest });
            }
        }
    }
    out.sort_by(|a, b| a.dest().cmp(b.dest()));
    out.dedup();
    out
}

impl EtcItem {
    /// Where it appears in the sandbox.
    pub fn dest(&self) -> &Path {
        match self {
            EtcItem::Bind { dest, .. } | EtcItem::Symlink { dest, .. } => dest,
            EtcItem::Base(_) => Path::new("/etc"),
        }
    }
}

/// Prefix of the directory [`prepared`] makes, followed by the daemon's pid.
pub const VIEW_DIR_PREFIX: &str = "passepartout-etc-";

/// Files in `/etc` that are always mounted over (the synthetic ones): the
/// prepared directory holds an empty file for each.
const MOUNT_POINT_FILES: &[&str] = &["passwd", "group", "resolv.conf"];

/// A file copied into the prepared directory, and what it was copied from.
#[derive(Debug, Clone)]
struct Copied {
    source: PathBuf,
    target: PathBuf,
    stamp: Option<(u64, i64, i64)>,
}

fn copies() -> std::sync::MutexGuard<'static, Vec<Copied>> {
    static COPIES: std::sync::OnceLock<std::sync::Mutex<Vec<Copied>>> = std::sync::OnceLock::new();
    COPIES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Size and modification time of a file, to see that it changed.
fn stamp(p: &Path) -> Option<(u64, i64, i64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(p)
        .ok()
        .map(|m| (m.len(), m.mtime(), m.mtime_nsec()))
}

/// `items` made into one directory of this daemon's (see
/// [`EtcItem::Base`]) plus a bind per listed directory; `items` unchanged
/// when the directory cannot be made (a warning is logged).
pub fn prepared(items: Vec<EtcItem>) -> Vec<EtcItem> {
    match prepare_in(&std::env::temp_dir(), &items) {
        Ok(out) => out,
        Err(e) => {
            tracing::warn!("the sandbox's /etc is mounted file by file: {e}");
            items
        }
    }
}

fn prepare_in(tmp: &Path, items: &[EtcItem]) -> std::io::Result<Vec<EtcItem>> {
    use std::os::unix::fs::PermissionsExt;
    remove_stale(tmp);
    let holder = tempfile::Builder::new()
        .prefix(&format!("{VIEW_DIR_PREFIX}{}-", std::process::id()))
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir_in(tmp)?
        .keep();
    // What the sandbox sees as /etc: readable, like the host's.
    let base = holder.join("etc");
    std::fs::create_dir(&base)?;
    std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755))?;
    let inside = |dest: &Path| dest.strip_prefix("/etc").map(|rel| base.join(rel));
    let mut out = vec![EtcItem::Base(base.clone())];
    let mut copied = Vec::new();
    for item in items {
        match item {
            EtcItem::Symlink { dest, target } => {
                let Ok(at) = inside(dest) else { continue };
                make_parents(&base, &at)?;
                std::os::unix::fs::symlink(target, &at)?;
            }
            EtcItem::Bind { source, dest } if source.is_file() => {
                let Ok(at) = inside(dest) else { continue };
                make_parents(&base, &at)?;
                let c = Copied {
                    source: source.clone(),
                    target: at,
                    stamp: stamp(source),
                };
                copy(&c)?;
                copied.push(c);
            }
            EtcItem::Bind { dest, .. } => {
                let Ok(at) = inside(dest) else { continue };
                make_parents(&base, &at)?;
                std::fs::create_dir(&at)?;
                out.push(item.clone());
            }
            EtcItem::Base(_) => {}
        }
    }
    for f in MOUNT_POINT_FILES {
        let at = base.join(f);
        if !at.exists() {
            std::fs::write(&at, "")?;
        }
    }
    *copies() = copied;
    Ok(out)
}

fn make_parents(base: &Path, at: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    if let Some(parent) = at.parent().filter(|p| *p != base) {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(parent)?;
        std::fs::set_permissions(parent, std::fs::Permissions::from_mode(0o755))?;
    }
    Ok(())
}

/// Copy one file (through a new file renamed into place: a run reading it
/// meanwhile sees the old or the new one), readable like an `/etc` file.
fn copy(c: &Copied) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let tmp = c.target.with_extension("passepartout-new");
    std::fs::copy(&c.source, &tmp)?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o644))?;
    std::fs::rename(&tmp, &c.target)
}

/// Before a run: copy again the files of the prepared `/etc` whose source
/// changed since (`apt` rewrote `ld.so.cache`, the person edited
/// `hosts`). A few `stat`s.
pub fn refresh() {
    let mut copies = copies();
    for c in copies.iter_mut() {
        let now = stamp(&c.source);
        if now != c.stamp && now.is_some() {
            match copy(c) {
                Ok(()) => c.stamp = now,
                Err(e) => tracing::warn!("the sandbox's {} is stale: {e}", c.target.display()),
            }
        }
    }
}

/// Remove the prepared `/etc` directories of daemons that are gone.
fn remove_stale(tmp: &Path) {
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return;
    };
    for entry in entries
        .filter_map(Result::ok)
        .take(super::session_tmp::STALE_SCAN_LIMIT)
    {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(VIEW_DIR_PREFIX))
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// The names under `etc` that `pattern` stands for: itself, or with a
/// trailing `*` every entry of its directory starting with the rest.
fn expand(etc: &Path, pattern: &str) -> Vec<PathBuf> {
    let Some(prefix) = pattern.strip_suffix('*') else {
        return vec![PathBuf::from(pattern)];
    };
    let (dir, start) = match prefix.rsplit_once('/') {
        Some((d, s)) => (etc.join(d), s),
        None => (etc.to_path_buf(), prefix),
    };
    let Ok(rd) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let base = prefix.rsplit_once('/').map(|(d, _)| d);
    let mut names: Vec<PathBuf> = rd
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|n| n.starts_with(start))
        .map(|n| match base {
            Some(b) => Path::new(b).join(n),
            None => PathBuf::from(n),
        })
        .collect();
    names.sort();
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_listed_entries_are_shown_and_secrets_never() {
        let etc = tempfile::tempdir().unwrap();
        let p = etc.path();
        for d in [
            "ssl/certs",
            "ssl/private",
            "alternatives",
            "python3.11",
            "apt",
        ] {
            std::fs::create_dir_all(p.join(d)).unwrap();
        }
        for f in [
            "ssl/certs/ca-certificates.crt",
            "ssl/private/x.key",
            "shadow",
            "gitconfig",
            "hosts",
            "ld.so.cache",
            "nsswitch.conf",
            "apt/sources.list",
        ] {
            std::fs::write(p.join(f), "x").unwrap();
        }
        std::os::unix::fs::symlink("/usr/share/zoneinfo/Etc/UTC", p.join("localtime")).unwrap();
        let items = probe_etc(p);
        let dests: Vec<&Path> = items.iter().map(EtcItem::dest).collect();
        assert_eq!(
            dests,
            [
                "/etc/alternatives",
                "/etc/hosts",
                "/etc/ld.so.cache",
                "/etc/localtime",
                "/etc/nsswitch.conf",
                "/etc/python3.11",
                "/etc/ssl/certs",
            ]
            .map(Path::new)
        );
        assert!(items.contains(&EtcItem::Symlink {
            dest: "/etc/localtime".into(),
            target: "/usr/share/zoneinfo/Etc/UTC".into()
        }));
        assert!(items.contains(&EtcItem::Bind {
            source: p.join("ssl/certs"),
            dest: "/etc/ssl/certs".into()
        }));
    }

    #[test]
    fn the_prepared_etc_holds_copies_links_and_mount_points() {
        let etc = tempfile::tempdir().unwrap();
        let p = etc.path();
        std::fs::create_dir_all(p.join("ssl/certs")).unwrap();
        std::fs::write(p.join("hosts"), "127.0.0.1 localhost\n").unwrap();
        std::fs::write(p.join("ssl/openssl.cnf"), "# cnf\n").unwrap();
        std::os::unix::fs::symlink("/usr/share/zoneinfo/UTC", p.join("localtime")).unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let items = prepare_in(tmp.path(), &probe_etc(p)).unwrap();
        let EtcItem::Base(base) = &items[0] else {
            panic!("{items:?}")
        };
        assert_eq!(
            items[1..],
            [EtcItem::Bind {
                source: p.join("ssl/certs"),
                dest: "/etc/ssl/certs".into()
            }]
        );
        assert_eq!(
            std::fs::read_to_string(base.join("hosts")).unwrap(),
            "127.0.0.1 localhost\n"
        );
        assert!(base.join("ssl/certs").is_dir());
        assert_eq!(
            std::fs::read_link(base.join("localtime")).unwrap(),
            Path::new("/usr/share/zoneinfo/UTC")
        );
        for f in MOUNT_POINT_FILES {
            assert!(base.join(f).is_file(), "{f}");
        }
        // A changed source is copied again before the next run.
        std::fs::write(p.join("hosts"), "127.0.0.1 localhost changed\n").unwrap();
        refresh();
        assert_eq!(
            std::fs::read_to_string(base.join("hosts")).unwrap(),
            "127.0.0.1 localhost changed\n"
        );
    }

    #[test]
    fn nothing_listed_is_also_left_out() {
        for out in ETC_LEFT_OUT {
            assert!(
                !ETC_ENTRIES
                    .iter()
                    .any(|e| out.name.starts_with(e.name.trim_end_matches('*'))
                        || e.name.starts_with(out.name)),
                "{} is both shown and left out",
                out.name
            );
        }
    }
}
